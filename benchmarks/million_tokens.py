"""A long stream at constant memory: StreamingLLM's "4M tokens" property, scaled to this machine.

The local corpora (``--texts``, concatenated with their line breaks; repeated from the start only if
they run out, and the report says how many tokens were repeats) stream through the model in chunks
of ``--chunk`` tokens with sinks 4 + window 1,020 and with sinks+h2o (4 sinks + 508 heavy + 512
recent) at the same budget, rolling positions. Per ``--segment`` tokens it records the perplexity,
the cache's stored bytes and the process's resident and peak memory. Stretches of text differ in
difficulty, so "flat" is judged against StreamingLLM's oracle on the same tokens: the sliding window
with re-computation (each scored token sees its previous ``budget`` tokens re-encoded from scratch),
at ``--samples`` random tokens of every segment.

Two checks say what the shortcuts change:
- chunking: the first ``--check-tokens`` tokens are also streamed token by token (the papers'
  protocol). In a chunk, eviction happens between chunks, so a chunk's tokens see up to
  budget + chunk - 1 earlier tokens;
- positions: rolling positions keep the model's own (growing) position for new tokens and rotate
  kept keys; the same ``--check-tokens`` tokens are streamed as if met at position ``--tokens``
  (``PolicyCache(start=...)``), so fp32 RoPE angles that far out are tested without streaming there.

    python benchmarks/million_tokens.py --out runs/million            # 1,048,576 tokens: ~3 h per policy here
    python benchmarks/million_tokens.py --tokens 32768 --segment 4096 --samples 8 --check-tokens 2048 --out runs/million
        # what benchmarks/README.md records (1,357 s on 2 CPU cores)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from attnlab.core.plotting import plt
from attnlab.data.sources import read_corpus
from attnlab.evals.inputs import load_model
from attnlab.evals.streaming import recompute_nll, stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

TEXTS = "kjv/kjv.txt,war-and-peace/warpeace.txt,wikitext-2/test.txt,wikitext-2/valid.txt,tinyshakespeare/input.txt"


def corpus_ids(tok, texts: list[str], tokens: int) -> tuple[torch.Tensor, dict]:
    """The first ``tokens`` ids (T,) of the texts one after another, cycling if they run out; what was used."""
    ids, used = [], {}
    for name in texts:
        lines = read_corpus(name, "texts", "--texts A,B,...")
        for i in range(0, len(lines), 2000):
            if len(ids) >= tokens:
                break
            piece = tok("".join(line + "\n" for line in lines[i:i + 2000]), add_special_tokens=False)["input_ids"]
            piece = piece[:tokens - len(ids)]
            ids += piece
            used[name] = used.get(name, 0) + len(piece)
    unique = len(ids)
    while len(ids) < tokens:
        ids += ids[:min(unique, tokens - len(ids))]
    return torch.tensor(ids[:tokens]), {"tokens_per_text": used, "repeated_tokens": max(0, tokens - unique)}


def memory_mib() -> tuple[float, float]:
    """(resident, peak resident) MiB of this process: /proc where there is one, else the peak twice."""
    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
        return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak, peak


def policy_of(name: str, args):
    return make_policy(name, budget=args.budget, n_sink=4, recent=args.budget // 2 if name == "sinks+h2o" else None)


def stream_segments(model, ids, name: str, args, bar) -> tuple[np.ndarray, list[dict]]:
    """One policy over the whole stream, a segment at a time through one cache: NLL (T-1,) and per segment
    its PPL, stored bytes, memory and seconds."""
    cache = PolicyCache(model, policy_of(name, args), "rolling")
    nll, rows = [], []
    for a in range(0, len(ids) - 1, args.segment):
        b = min(a + args.segment, len(ids) - 1)
        r = stream_nll(model, ids[a:b + 1], cache, args.chunk, bar)  # scores tokens a+1..b
        rss, peak = memory_mib()
        nll.append(r.nll)
        rows.append({"tokens": b, "ppl": r.ppl, "kv_bytes": cache.kv_bytes(), "stored": cache.stored(),
                     "rss_mib": rss, "peak_rss_mib": peak, "seconds": r.seconds, "tokens_per_s": r.tokens_per_s})
    return np.concatenate(nll), rows


def control(model, ids, nll: dict, args) -> list[dict]:
    """Per segment: re-computation's PPL at sampled tokens, and each policy's at the same tokens."""
    rng, rows = np.random.default_rng(args.seed), []
    n = len(ids) - 1
    with tqdm(total=args.samples * math.ceil(n / args.segment), desc="re-computation") as bar:
        for a in range(0, n, args.segment):
            lo, hi = max(a, args.budget), min(a + args.segment, n)
            ts = np.sort(rng.choice(np.arange(lo, hi), min(args.samples, hi - lo), replace=False))
            rec = recompute_nll(model, ids, args.budget, [int(t) for t in ts], bar).nll
            rows.append({"tokens": hi, "positions": ts.tolist(), "recompute_ppl": math.exp(rec.mean()),
                         **{f"{k}_ppl": math.exp(v[ts].mean()) for k, v in nll.items()}})
    return rows


def checks(model, ids, args) -> dict:
    """PPL past the fill on the first check tokens: chunked vs token by token, and met at position --tokens."""
    part, out = ids[:args.check_tokens], {}
    for name in args.policies:
        ppl = {}
        for label, chunk, start in (("chunked", args.chunk, 0), ("token by token", 1, 0),
                                    (f"chunked, from position {args.tokens}", args.chunk, args.tokens)):
            with tqdm(total=len(part) - 1, desc=f"check {name}: {label}") as bar:
                r = stream_nll(model, part, PolicyCache(model, policy_of(name, args), "rolling", start), chunk, bar)
            ppl[label] = r.ppl_of(args.budget)
        out[name] = ppl
    return out


def figure(policies: dict, ctrl: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(1, 3, figsize=(15, 3.6), layout="constrained")
    x = [r["tokens"] for r in ctrl]
    ax[0].plot(x, [r["recompute_ppl"] for r in ctrl], "k-x", label="re-computation (sampled tokens)")
    for i, (name, rows) in enumerate(policies.items()):
        ax[0].plot([r["tokens"] for r in rows], [r["ppl"] for r in rows], "-o", color=f"C{i}", label=f"{name} (all)")
        ax[0].plot(x, [r[f"{name}_ppl"] for r in ctrl], "--", color=f"C{i}", label=f"{name} (sampled tokens)")
        ax[1].plot([r["tokens"] for r in rows], [r["kv_bytes"] / 2**20 for r in rows], "-o", label=name)
        ax[2].plot([r["tokens"] for r in rows], [r["peak_rss_mib"] for r in rows], "-o", label=f"{name}: peak")
        ax[2].plot([r["tokens"] for r in rows], [r["rss_mib"] for r in rows], ":", color=f"C{i}", label=f"{name}: now")
    ax[0].set(xlabel="tokens streamed", ylabel="PPL per segment", title="perplexity", yscale="log")
    ax[1].set(xlabel="tokens streamed", ylabel="KV cache (MiB)", title="stored keys and values", ylim=(0, None))
    ax[2].set(xlabel="tokens streamed", ylabel="MiB", title="process memory (RSS)", ylim=(0, None))
    for a in ax:
        a.legend(fontsize=7)
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--texts", default=TEXTS, help="corpora, comma-separated, in stream order")
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--segment", type=int, default=1 << 16)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--samples", type=int, default=32, help="re-computed tokens per segment")
    ap.add_argument("--check-tokens", type=int, default=3072)
    ap.add_argument("--policies", default="sinks,sinks+h2o")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.policies = args.policies.split(",")
    if not 0 < args.budget < args.check_tokens <= args.tokens or args.segment <= args.budget:
        ap.error("need 0 < --budget < --check-tokens <= --tokens and --segment > --budget")
    t0 = time.perf_counter()
    model, tok = load_model(args.model)
    ids, source = corpus_ids(tok, args.texts.split(","), args.tokens + 1)
    policies, nll = {}, {}
    for name in args.policies:
        with tqdm(total=len(ids) - 1, desc=name) as bar:
            nll[name], policies[name] = stream_segments(model, ids, name, args, bar)
    report = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, **source,
              "threads": torch.get_num_threads(), "policies": policies, "control": control(model, ids, nll, args),
              "checks": checks(model, ids, args)}
    report["seconds"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "million_tokens.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, args.out / "million_tokens.json")  # written aside, then renamed: never half a file
    figure(policies, report["control"], args.out / "million_tokens.png")
    print(json.dumps({k: report[k] for k in ("seconds", "repeated_tokens", "checks")}, indent=1))


if __name__ == "__main__":
    main()
