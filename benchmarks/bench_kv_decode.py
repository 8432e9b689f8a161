"""Decode speed and KV memory of the evicting caches vs the full cache, side by side in one run.

For each stored length L (tokens already streamed): prefill L tokens of real text into every
cache (chunked); then, every cache at every length prefilled, warm up and time ``--decode`` single-token steps,
all of them taking turns step by step (so the machine's drift hits every cache and length alike); report the
median per-token time as tokens/s and the bytes each cache holds. Also: H2O's step time over sinks' at the
same budget and positions (rolling, and original: no re-rotation), each policy's per-token overhead against
transformers' own DynamicCache (plain SDPA) at the same stored length, and StreamingLLM's
comparison, sinks vs the sliding window with re-computation at the same window. One more H2O row lets its
kept keys owe their rolling rotations for --lag-limit evictions, paid through the query (attnlab.kv.rolling).

    python benchmarks/bench_kv_decode.py                       # SmolLM2, lengths 1k, 4k, 8k, budget 1024
    python benchmarks/bench_kv_decode.py --lengths 1024 --decode 8 --device cuda
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch
from transformers import DynamicCache

from attnlab.data.sources import read_corpus
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.models import arch
from attnlab.models.pretrained import load_model_and_tokenizer

from host import (  # benchmarks/host.py
    add_out,
    corpus,
    device,
    kv_budget,
    model_name,
    parser,
    positive_int,
    positive_ints,
    recorded,
)


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _active(cache):
    """The cache's context (PolicyCache switches the attention implementation; DynamicCache: none)."""
    return cache if isinstance(cache, PolicyCache) else contextlib.nullcontext()


@torch.no_grad()
def prefill(model, ids, length, make_cache, chunk=512):
    cache = make_cache()
    with _active(cache):
        for s in range(0, length, chunk):
            model(ids[None, s:min(s + chunk, length)], past_key_values=cache)
    return cache


@torch.no_grad()
def decode_interleaved(model, ids, caches: dict, n_decode, device) -> dict:
    """Time n_decode single-token steps of every cache, round-robin (step i of each cache before
    step i+1 of any), so drift in the machine's speed hits all of them alike. ``caches``: {key: (cache, L)},
    L the tokens it holds (its next token is ids[L + i]); -> {key: median s}."""
    times = {k: [] for k in caches}
    for i in range(n_decode + 4):  # 4 warm-up steps: the first evicts the last prefill chunk
        for key, (cache, length) in caches.items():
            tok = ids[None, length + i:length + i + 1]
            with _active(cache):
                _sync(device)
                t0 = time.perf_counter()
                model(tok, past_key_values=cache)
                _sync(device)
            if i >= 4:
                times[key].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def rerotated(cache) -> int:
    """Keys a cache has re-rotated so far, all layers (rolling positions; 0 for DynamicCache)."""
    return sum(getattr(layer, "rerotated", 0) for layer in cache.layers)


def kv_heads(model) -> int:
    """Layers x KV heads: the (layer, head) pairs each step's eviction runs on."""
    d = arch.dims(model)
    return d.n_layers * d.n_kv_heads


def kv_bytes(cache) -> int:
    """Bytes of the keys and values ``cache`` stores now (a PolicyCache or transformers' DynamicCache)."""
    return cache.kv_bytes() if isinstance(cache, PolicyCache) else sum(
        l.keys.nbytes + l.values.nbytes for l in cache.layers)


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


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--text", type=corpus(), default="kjv")
    ap.add_argument("--lengths", type=positive_ints, default="1024,4096,8192")
    ap.add_argument("--budget", type=kv_budget("sinks", "h2o", "sinks+h2o"), default=1024)
    ap.add_argument("--decode", type=positive_int, default=32, help="timed decode steps per cell")
    ap.add_argument("--device", type=device, default="cpu")
    ap.add_argument("--lag-limit", type=positive_int, default=4,
                    help="evictions H2O's keys may owe their rotations for in the 'rotations owed' row")
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    lengths = list(args.lengths)
    model, tok = load_model_and_tokenizer(args.model)
    model.to(args.device)
    text = "".join(read_corpus(args.text, "text")[:40000])
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"][: max(lengths) + args.decode + 8],
                       device=args.device)
    b, dyn, full = args.budget, "DynamicCache (HF, sdpa)", "full (attnlab)"
    owed = f"h2o {b // 2}+{b // 2}, rotations owed ({args.lag_limit} evictions)"  # paid through the query
    configs = {
        dyn: lambda: DynamicCache(config=model.config),
        full: lambda: PolicyCache(model, make_policy("full"), "rolling"),
        f"sinks 4+{b - 4}": lambda: PolicyCache(model, make_policy("sinks", budget=b, n_sink=4), "rolling"),
        f"sinks 4+{b - 4}, original positions": lambda: PolicyCache(model, make_policy("sinks", budget=b, n_sink=4),
                                                                    "original"),
        f"h2o {b // 2}+{b // 2}": lambda: PolicyCache(model, make_policy("h2o", budget=b), "rolling"),
        f"h2o {b // 2}+{b // 2}, original positions": lambda: PolicyCache(model, make_policy("h2o", budget=b),
                                                                           "original"),
        f"sinks+h2o 4+{b // 2 - 4}+{b // 2}": lambda: PolicyCache(model, make_policy("sinks+h2o", budget=b, n_sink=4),
                                                                 "rolling"),
        owed: lambda: PolicyCache(model, make_policy("h2o", budget=b), "rolling", lag_limit=args.lag_limit),
    }
    print(f"# {args.model} on {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"budget {b}, median of {args.decode} decode steps")
    print("| cache | " + " | ".join(f"{L} tok/s | {L} KV MiB" for L in lengths) + " |")
    print("|---|" + "---|---|" * len(lengths))
    # every (cache, length) pair is prefilled first and all take turns in one loop: the lengths are compared
    # within one run's drift too, not minutes apart (a host whose speed drifts made fixed-size caches look slower
    # at 8k when each length ran after the last)
    caches = {(name, L): (prefill(model, ids, L, make), L) for L in lengths for name, make in configs.items()}
    before = {k: rerotated(c) for k, (c, _) in caches.items()}
    res = decode_interleaved(model, ids, caches, args.decode, args.device)
    mem = {k: kv_bytes(c) for k, (c, _) in caches.items()}
    # keys re-rotated a step, per layer and KV head (the 4 warm-up steps counted too)
    rerot = {k: (rerotated(c) - before[k]) / ((args.decode + 4) * kv_heads(model)) for k, (c, _) in caches.items()}
    del caches
    for name in configs:
        print(f"| {name} | " + " | ".join(f"{1 / res[name, L]:.1f} | {mem[name, L] / 2**20:.1f}" for L in lengths)
              + " |", flush=True)
    for L in lengths:
        print(f"at {L}: " + ", ".join(f"{n} {res[full, L] / res[n, L]:.2f}x full" for n in configs
                                      if n not in (full, dyn)))
    # overhead at equal stored length: a policy holding b tokens vs DynamicCache holding b tokens
    if b in lengths:
        base = res[dyn, b]
        print(f"overhead vs DynamicCache at {b} stored: " + ", ".join(
            f"{n} {res[n, b] / base - 1:+.1%}" for n in configs if n != dyn))
    # H2O's per-step cost over sinks at the same budget and positions: its accumulated scores (eager attention
    # with the probabilities) and, with rolling positions, re-rotating the keys older than a mid-cache eviction
    sinks_r, sinks_o = f"sinks 4+{b - 4}", f"sinks 4+{b - 4}, original positions"
    pairs = [(f"h2o {b // 2}+{b // 2}", sinks_r, "rolling"), (f"sinks+h2o 4+{b // 2 - 4}+{b // 2}", sinks_r, "rolling"),
             (owed, sinks_r, "rolling"), (f"h2o {b // 2}+{b // 2}, original positions", sinks_o, "original")]
    for L in lengths:
        print(f"h2o's step over sinks' at {L}: " + ", ".join(
            f"{h} {res[h, L] / res[s, L] - 1:+.1%} ({pos} positions)" for h, s, pos in pairs))
        print(f"keys re-rotated a step per layer and KV head at {L} (of {b} stored): " + ", ".join(
            f"{n} {rerot[n, L]:.1f}" for n in configs if "original" not in n and n not in (dyn, full)))
    # the floor: what one decode step costs with (almost) nothing cached -- the model's weights alone
    floor = decode_interleaved(model, ids, {dyn: (prefill(model, ids, 16, configs[dyn]), 16)}, args.decode,
                               args.device)[dyn]
    L = lengths[-1]
    print(f"floor (DynamicCache, 16 tokens cached): {1 / floor:.1f} tok/s, so no cache can decode faster than "
          f"{res[full, L] / floor:.2f}x full at {L}")
    t_re = recompute_step(model, ids, b, 4, args.device)
    sinks = res[f"sinks 4+{b - 4}", lengths[-1]]
    print(f"streaming at window {b}: sinks {1 / sinks:.1f} tok/s vs recompute {1 / t_re:.2f} tok/s: "
          f"{t_re / sinks:.1f}x")


if __name__ == "__main__":
    main()
