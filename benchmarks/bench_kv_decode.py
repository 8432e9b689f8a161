"""Decode speed and KV memory of the evicting caches vs the full cache, side by side in one run.

For each stored length L (tokens already streamed): prefill L tokens of real text (chunked),
warm up, then time ``--decode`` single-token steps; report the median per-token time as
tokens/s and the bytes the cache holds. Also: each policy's per-token overhead against
transformers' own DynamicCache (plain SDPA) at the same stored length, and StreamingLLM's
comparison, sinks vs the sliding window with re-computation at the same window.

    python benchmarks/bench_kv_decode.py                       # SmolLM2, lengths 1k, 4k, 8k, budget 1024
    python benchmarks/bench_kv_decode.py --lengths 1024 --decode 8 --device cuda
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from attnlab.hf.kv_cache import PolicyCache
from attnlab.hf.models import load_model_and_tokenizer
from attnlab.kv.policies import make_policy
from attnlab.text.sources import read_corpus


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def decode_run(model, ids, length, make_cache, n_decode, device, chunk=512):
    """Prefill ``length`` tokens, then time n_decode single-token steps: (median s/token, KV bytes)."""
    cache = make_cache()
    ctx = cache if isinstance(cache, PolicyCache) else _Null()
    with ctx:
        for s in range(0, length, chunk):
            model(ids[None, s:min(s + chunk, length)], past_key_values=cache)
        times = []
        for i in range(n_decode + 4):  # 4 warm-up steps: the first evicts the last prefill chunk
            tok = ids[None, length + i:length + i + 1]
            _sync(device)
            t0 = time.perf_counter()
            model(tok, past_key_values=cache)
            _sync(device)
            if i >= 4:
                times.append(time.perf_counter() - t0)
    kv = cache.kv_bytes() if isinstance(cache, PolicyCache) else sum(
        l.keys.nbytes + l.values.nbytes for l in cache.layers)
    return statistics.median(times), kv


@torch.no_grad()
def recompute_step(model, ids, window, n, device):
    times = []
    for i in range(n + 1):
        _sync(device)
        t0 = time.perf_counter()
        model(ids[None, i:i + window], use_cache=False)
        _sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--text", default="kjv")
    ap.add_argument("--lengths", default="1024,4096,8192")
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=32, help="timed decode steps per cell")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    model, tok = load_model_and_tokenizer(args.model)
    model.to(args.device)
    text = "".join(read_corpus(args.text, "text")[:40000])
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"][: max(lengths) + args.decode + 8],
                       device=args.device)
    b = args.budget
    configs = {
        "DynamicCache (HF, sdpa)": lambda: DynamicCache(config=model.config),
        "full (attnlab)": lambda: PolicyCache(model, make_policy("full"), "rolling"),
        f"sinks 4+{b - 4}": lambda: PolicyCache(model, make_policy("sinks", budget=b, n_sink=4), "rolling"),
        f"h2o {b // 2}+{b // 2}": lambda: PolicyCache(model, make_policy("h2o", budget=b), "rolling"),
        f"sinks+h2o 4+{b // 2 - 4}+{b // 2}": lambda: PolicyCache(model, make_policy("sinks+h2o", budget=b, n_sink=4),
                                                                 "rolling"),
    }
    print(f"# {args.model} on {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"budget {b}, median of {args.decode} decode steps")
    print("| cache | " + " | ".join(f"{L} tok/s | {L} KV MiB" for L in lengths) + " |")
    print("|---|" + "---|---|" * len(lengths))
    res = {}
    for name, make in configs.items():
        row = []
        for L in lengths:
            t, kv = decode_run(model, ids, L, make, args.decode, args.device)
            res[name, L] = t
            row.append(f"{1 / t:.1f} | {kv / 2**20:.1f}")
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    full = "full (attnlab)"
    for L in lengths:
        print(f"at {L}: " + ", ".join(f"{n} {res[full, L] / res[n, L]:.2f}x full" for n in configs
                                      if n not in (full, "DynamicCache (HF, sdpa)")))
    # overhead at equal stored length: a policy holding b tokens vs DynamicCache holding b tokens
    if b in lengths:
        base = res["DynamicCache (HF, sdpa)", b]
        print(f"overhead vs DynamicCache at {b} stored: " + ", ".join(
            f"{n} {res[n, b] / base - 1:+.1%}" for n in configs if n != "DynamicCache (HF, sdpa)"))
    t_re = recompute_step(model, ids, b, 4, args.device)
    sinks = res[f"sinks 4+{b - 4}", lengths[-1]]
    print(f"streaming at window {b}: sinks {1 / sinks:.1f} tok/s vs recompute {1 / t_re:.2f} tok/s: "
          f"{t_re / sinks:.1f}x")


if __name__ == "__main__":
    main()
