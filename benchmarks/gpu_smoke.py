"""Every registered experiment once on a GPU, quick settings, on a randomly initialised model of a real
config: does each command run there at all?

    python benchmarks/gpu_smoke.py --device cuda --out benchmarks/results/gpu-smoke
    python benchmarks/gpu_smoke.py --only probe,sparsity,relu-control --layers 4      # a few, a shallower model
    python benchmarks/gpu_smoke.py --layers 4 --jobs 8 --limit 240                     # all, eight at once

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

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from attnlab.experiments.registry import EXPERIMENTS, load_all

from host import add_out, device, machine, one_of, parser, positive_int, recorded  # benchmarks/host.py
from shapes import random_llama  # benchmarks/shapes.py

DEVICE_ERROR = "Expected all tensors to be on the same device"


def random_model(folder: Path, layers: int) -> Path:
    """SmolLM2-135M's config (``layers`` decoder layers) with fresh weights, and a byte-level BPE tokenizer
    trained here on the start of an embedded text (4,096 tokens: common words are single tokens, as the probes'
    first-token replacements need)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    from attnlab.data.sources import read_corpus

    model = random_llama("smollm2", num_hidden_layers=layers)
    model.save_pretrained(folder)
    tok = Tokenizer(tm.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(4096, model.config.vocab_size), special_tokens=["<|endoftext|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(read_corpus("war-and-peace", "text")[:20000], trainer)  # id 0: bos = eos = pad
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
    fields = {f.name: f.type for f in dataclasses.fields(exp.config_cls)}
    argv = [sys.executable, "-m", "attnlab", "reproduce", name, "--quick", "--device", device, "--out", str(out / name)]
    if fields.get("model") in (str, "str"):  # a model to load (not a config of one built here)
        argv += ["--set", f"model={model}"]
    t0 = time.perf_counter()
    try:
        env = {**os.environ, "ATTNLAB_OFFLINE": "1"}  # the random model is a folder: nothing to fetch
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=env)
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = None, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    return {"experiment": name, "model": "random SmolLM2-shaped" if "--set" in argv else "its own",
            "seconds": time.perf_counter() - t0, "verdict": verdict(rc, output),
            "tail": "" if rc == 0 else output[-3000:]}  # what a failure printed last, kept for its diagnosis


def _experiments():
    load_all()
    return EXPERIMENTS


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--device", type=device, default="cuda", help="cuda (default), or cpu to check the script itself")
    p.add_argument("--only", type=one_of(_experiments, "experiment", many=True), default=None,
                   help="comma-separated experiment names (default: every registered one)")
    p.add_argument("--layers", type=positive_int, default=30, help="decoder layers of the random model (SmolLM2: 30)")
    p.add_argument("--limit", type=positive_int, default=600, help="seconds one experiment may run (default 600)")
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="experiments run at once, each its own process sharing the device (default 1; a GPU "
                        "machine's CPU cores and memory allow several)")
    add_out(p)
    args = p.parse_args(argv)
    names = list(args.only or load_all())
    with recorded(args.out, figures := {}), tempfile.TemporaryDirectory() as tmp:
        model = random_model(Path(tmp) / "model", args.layers)
        print(f"# {machine()}; --device {args.device}; random model: SmolLM2-135M's config, {args.layers} layers\n")
        print("| experiment | model | seconds | verdict |\n|---|---|---|---|")
        runs = Path(tmp) / "runs"
        with ThreadPoolExecutor(args.jobs) as pool:  # each smoke is its own process: threads only wait
            futures = [pool.submit(smoke, name, model, args.device, runs, args.limit) for name in names]
            for f in as_completed(futures):
                r = f.result()
                print(f"| {r['experiment']} | {r['model']} | {r['seconds']:.0f} | {r['verdict']} |", flush=True)
        rows = figures["rows"] = [f.result() for f in futures]  # in the registry's order
        bad = [r["experiment"] for r in rows if r["verdict"] != "ok"]
        print(f"\n{len(rows) - len(bad)} of {len(rows)} ran" + (f"; not: {', '.join(bad)}" if bad else ""))
        for r in rows:  # what each failure printed last: the diagnosis, with no second run on the device
            if r["tail"]:
                print(f"\n## {r['experiment']}: {r['verdict']}\n\n```\n{r['tail'][-1500:].strip()}\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
