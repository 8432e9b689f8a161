"""Every registered experiment once on a GPU, quick settings, on a randomly initialised model of a real
config: does each command run there at all?

    python benchmarks/gpu_smoke.py --device cuda --out benchmarks/results/gpu-smoke
    python benchmarks/gpu_smoke.py --only probe,sparsity,relu-control --layers 4      # a few, a shallower model

Why random weights: a GPU machine lent to a session may reach no model hub and carries at most a few tens
of MB across, so the model is SmolLM2-135M's config (30 layers, d 576, 9 heads / 3 KV heads, SwiGLU 1,536)
with fresh weights and a byte-level tokenizer, written once into a folder every experiment that reads a
model is pointed at (``--set model=FOLDER``). Numbers from such a model mean nothing; the smoke test asks
only whether a command runs on the device. Each experiment runs as its own ``attnlab reproduce NAME --quick
--device DEVICE`` process (a crash in one cannot hide the next), with a time limit. The verdicts: ``ok``,
``device`` (a tensor left on the CPU: "Expected all tensors to be on the same device"), ``error`` (its last
line shown), ``timeout``. Run it whenever a GPU machine is at hand; on a CPU (``--device cpu``) it checks
the script itself.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnlab.experiments.registry import load_all

from host import add_out, machine, recorded  # benchmarks/host.py

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=256, eos_token_id=256,
               pad_token_id=256)
DEVICE_ERROR = "Expected all tensors to be on the same device"


def random_model(folder: Path, layers: int) -> Path:
    """SmolLM2-135M's config (``layers`` decoder layers) with fresh weights and a byte-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tm
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**SMOLLM2, "num_hidden_layers": layers})).save_pretrained(folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(tm.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])  # id 256: bos = eos = pad
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            pad_token="<|endoftext|>").save_pretrained(folder)
    return folder


def verdict(rc: int | None, output: str) -> str:
    """ok / device / timeout / error: LAST LINE."""
    if rc == 0:
        return "ok"
    if rc is None:
        return "timeout"
    if DEVICE_ERROR in output:
        return "device"
    last = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
    return "error: " + last[0].strip()[:160]


def smoke(name: str, model: Path, device: str, out: Path, limit: int) -> dict:
    """One experiment, quick, on ``device``, as its own process."""
    exp = load_all()[name]
    fields = {f.name for f in dataclasses.fields(exp.config_cls)}
    argv = [sys.executable, "-m", "attnlab", "reproduce", name, "--quick", "--device", device, "--out", str(out / name)]
    if "model" in fields:
        argv += ["--set", f"model={model}"]
    t0 = time.perf_counter()
    try:
        env = {**os.environ, "ATTNLAB_OFFLINE": "1"}  # the random model is a folder: nothing to fetch
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=env)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    return {"experiment": name, "model": "random SmolLM2-shaped" if "model" in fields else "its own",
            "seconds": time.perf_counter() - t0, "verdict": verdict(rc, output)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu to check the script itself")
    p.add_argument("--only", default="", help="comma-separated experiment names (default: every registered one)")
    p.add_argument("--layers", type=int, default=30, help="decoder layers of the random model (SmolLM2: 30)")
    p.add_argument("--limit", type=int, default=600, help="seconds one experiment may run (default 600)")
    add_out(p)
    args = p.parse_args(argv)
    known = load_all()
    names = [n for n in args.only.split(",") if n] or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown experiment(s) {', '.join(unknown)}: see `attnlab list`")
    with recorded(args.out, figures := {}), tempfile.TemporaryDirectory() as tmp:
        model = random_model(Path(tmp) / "model", args.layers)
        print(f"# {machine()}; --device {args.device}; random model: SmolLM2-135M's config, {args.layers} layers\n")
        print("| experiment | model | seconds | verdict |\n|---|---|---|---|")
        rows = figures["rows"] = []
        for name in names:
            rows.append(smoke(name, model, args.device, Path(tmp) / "runs", args.limit))
            r = rows[-1]
            print(f"| {name} | {r['model']} | {r['seconds']:.0f} | {r['verdict']} |", flush=True)
        bad = [r["experiment"] for r in rows if r["verdict"] != "ok"]
        print(f"\n{len(rows) - len(bad)} of {len(rows)} ran" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
