"""Decode tokens/s of ``attnlab stream``'s loop against a plain transformers decode loop, same model, same tokens.

``attnlab stream`` scores a text one token per forward (``attnlab.evals.streaming.stream_nll``) through a
PolicyCache. What does that cost over the loop a user would write by hand: ``model(token,
past_key_values=DynamicCache())``, the next token's log-probability gathered, nothing else? Side by side
in one run, the variants taking turns repeat by repeat (so the machine's drift hits all alike), medians:

- ``plain``: the hand-written loop over transformers' DynamicCache, the NLL kept on the device;
- ``stream, DynamicCache``: stream_nll with no PolicyCache (the loop's own bookkeeping alone);
- ``stream, full``: stream_nll through PolicyCache with the full policy (what ``attnlab stream --policy
  full`` runs: our cache layer and attention function, nothing evicted);
- ``stream, sinks``: the same with sinks+window at --budget (eviction every step once the budget is full);
- ``stream, h2o``: the same with H2O at --budget (the attention probabilities materialised for its scores);
- ``stream, h2o rolling`` and ``..., rotations owed``: H2O with rolling positions, the kept keys older than each
  evicted one rotated at once, or owing their rotations for 4 evictions and paid through the query
  (``attnlab.kv.rolling``; issue 56 item 6: on a GPU, where each small op is a launch, owing should pay).

The model is a randomly initialised one of a real config (speed does not depend on what weights learned;
a GPU machine may reach no model hub). Goal on a GPU (issue 56): full, sinks and h2o each >= 0.95x ``plain``,
over >= 10 passes with their spread, one torch thread. ``--profile N`` adds torch.profiler's top operators of
``plain`` and ``stream, full`` over N tokens: where a slower loop spends its time.

    python benchmarks/bench_stream_loop.py --device cuda --repeats 10 --out benchmarks/results/bench-stream-loop-gpu
    python benchmarks/bench_stream_loop.py --hidden 144 --tokens 128      # CPU, launch-bound like a GPU
"""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from attnlab.evals.streaming import stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

# benchmarks/host.py
from host import add_out, device, kv_budget, machine, natural, one_of, parser, positive_int, recorded
from shapes import CONFIGS, random_llama  # benchmarks/shapes.py


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def plain_loop(model, ids: torch.Tensor) -> torch.Tensor:
    """The hand-written decode loop: one token per forward over a DynamicCache; ids (T,) on the device."""
    nll = torch.empty(ids.numel() - 1, device=ids.device)
    past = DynamicCache()
    for t in range(ids.numel() - 1):
        logits = model(ids[None, t:t + 1], past_key_values=past, use_cache=True).logits[0, -1]  # (V,)
        nll[t] = -F.log_softmax(logits.float(), -1)[ids[t + 1]]
    return nll


def variants(model, budget: int) -> dict:
    """name -> fn(ids) decoding every token of ids once."""
    return {"plain": lambda ids: plain_loop(model, ids),
            "stream, DynamicCache": lambda ids: stream_nll(model, ids, None),
            "stream, full": lambda ids: stream_nll(model, ids, PolicyCache(model, make_policy("full"))),
            "stream, sinks": lambda ids: stream_nll(model, ids,
                                                    PolicyCache(model, make_policy("sinks", budget=budget))),
            "stream, h2o": lambda ids: stream_nll(model, ids, PolicyCache(model, make_policy("h2o", budget=budget))),
            "stream, h2o rolling": lambda ids: stream_nll(model, ids, PolicyCache(
                model, make_policy("h2o", budget=budget), "rolling")),
            "stream, h2o rolling, rotations owed": lambda ids: stream_nll(model, ids, PolicyCache(
                model, make_policy("h2o", budget=budget), "rolling", lag_limit=OWED))}

OWED = 4  # evictions the owed-rotations row lets H2O's keys owe (attnlab.kv.rolling)


GOAL_LOOPS = ("stream, full", "stream, sinks", "stream, h2o")


def profile(fn, ids, device: str) -> str:
    """torch.profiler's operators of one pass, by total time on the host (and the device, on a GPU)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as run

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with run(activities=acts) as prof:
        fn(ids)
        _sync(device)
    key = "cuda_time_total" if device == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=50)


def timed(fn, ids, device: str) -> float:
    """Seconds for one pass over ids, the device drained before and after."""
    _sync(device)
    t0 = time.perf_counter()
    fn(ids)
    _sync(device)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--device", type=device, default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--config", type=one_of(CONFIGS, "config"), default="smollm2",
                    help="the real config the random model has (default smollm2)")
    ap.add_argument("--hidden", type=positive_int, default=None,
                    help="override the width (a multiple of the heads; a narrow model is launch-bound)")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"],
                    help="weights and activations (default bfloat16, as models are served on a GPU)")
    ap.add_argument("--tokens", type=positive_int, default=512, help="tokens decoded per pass (default 512)")
    ap.add_argument("--budget", type=kv_budget("sinks", "h2o"), default=256,
                    help="sinks' and h2o's KV budget (default 256)")
    ap.add_argument("--repeats", type=positive_int, default=10, help="passes per variant, in turns (default 10)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1: a GPU loop's host "
                                                                    "side runs on one)")
    ap.add_argument("--profile", type=natural, default=0,
                    help="tokens of plain and stream, full to profile after the timing (default 0: none)")
    add_out(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    heads = CONFIGS[args.config]["num_attention_heads"]
    if args.hidden is not None and args.hidden % (2 * heads):  # whole heads, each of an even size (RoPE's pairs)
        ap.error(f"--hidden {args.hidden}: give a multiple of {2 * heads} ({heads} heads of an even size)")
    over = {} if args.hidden is None else {"hidden_size": args.hidden, "intermediate_size": 8 * args.hidden // 3}
    model = random_llama(args.config, **over).to(args.device, getattr(torch, args.dtype))
    ids = torch.randint(0, model.config.vocab_size, (args.tokens + 1,), generator=torch.Generator().manual_seed(0))
    ids = ids.to(args.device)
    fns = variants(model, args.budget)
    with recorded(args.out, figures := {}):
        print(f"# {machine()}; device {args.device}"
              f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}; random {args.config}"
              f"{f' (hidden {args.hidden})' if args.hidden else ''}, {args.dtype}; {args.tokens} tokens per pass, "
              f"{args.repeats} passes each, in turns; median tokens/s\n")
        for fn in fns.values():  # warm-up: kernels chosen, caches allocated
            fn(ids[:17])
        times = {name: [] for name in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                times[name].append(timed(fn, ids, args.device))
        plain = statistics.median(times["plain"])
        print("| loop | tokens/s (median) | x plain | x plain, slowest to fastest pass |\n|---|---|---|---|")
        rows = figures["rows"] = []
        for name, ts in times.items():
            med = statistics.median(ts)
            spread = (plain / max(ts), plain / min(ts))
            rows.append({"loop": name, "tokens_per_s": args.tokens / med, "x_plain": plain / med,
                         "x_plain_spread": spread, "seconds": ts})
            print(f"| {name} | {args.tokens / med:.1f} | {plain / med:.3f} | {spread[0]:.3f} to {spread[1]:.3f} |")
        judged = {r["loop"]: r["x_plain"] for r in rows if r["loop"] in GOAL_LOOPS}
        met = min(judged.values()) >= 0.95
        figures["goal"] = {"x_plain": judged, "goal": 0.95, "met": met, "repeats": args.repeats,
                           "stream_full_x_plain": judged["stream, full"]}
        print(f"\nfull, sinks, h2o at {', '.join(f'{v:.3f}' for v in judged.values())}x the plain loop: goal >= 0.95x "
              f"each {'met' if met else 'not met'}")
        owed = {r["loop"]: r["x_plain"] for r in rows if r["loop"].startswith("stream, h2o rolling")}
        figures["owed_over_rotated"] = owed["stream, h2o rolling, rotations owed"] / owed["stream, h2o rolling"]
        print(f"H2O rolling, rotations owed over rotated at once: {figures['owed_over_rotated']:.3f}x")
        if args.profile:
            figures["profile"] = {name: profile(fns[name], ids[:args.profile + 1], args.device)
                                  for name in ("plain", "stream, full")}
            for name, table in figures["profile"].items():
                print(f"\n## {name}: top operators over {args.profile} tokens\n\n```\n{table}\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
