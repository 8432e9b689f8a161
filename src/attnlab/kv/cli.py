"""``attnlab stream``: stream a text through a model with one KV-cache policy and measure it:
perplexity (token by token, as StreamingLLM and H2O evaluate), KV bytes and decode tokens/s,
beside the dense cache (and, on request, the sliding window with re-computation)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from attnlab.core.errors import UsageError

EPILOG = """examples:
  attnlab models fetch smollm2                    # once: the real model, into the cache
  attnlab stream --model smollm2 --policy sinks --budget 256 --out runs/sinks
  attnlab stream --model smollm2 --policy sinks+h2o --budget 256 --recent 128 --tokens 4096 --out runs/sh2o
  attnlab stream --model smollm2 --policy h2o --budget 0.2 --positions original --out runs/h2o20
  attnlab stream --model runs/llama/model --text war-and-peace --policy window --budget 128 --out runs/w

policies: full, window, sinks (StreamingLLM), h2o (heavy hitters + recent), sinks+h2o (StreamH2O).
--chunk N feeds N tokens per forward: exact for the dense cache, an approximation for the
evicting ones (a chunk sees the cache as it was before the chunk), and much faster on a CPU.
Writes OUT/metrics.json, OUT/stream.png (NLL per position, KV bytes) and OUT/nll.json."""


def _budget(text: str) -> int | float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give tokens (256) or a fraction (0.2)") from None
    return int(v) if v >= 1 and v.is_integer() else v


def add_parser(sub) -> None:
    p = sub.add_parser("stream", help="streaming perplexity, memory and speed of a KV-cache policy on a real model",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--text", default="kjv", help="a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    p.add_argument("--tokens", type=int, default=2048, help="stream length in tokens (default 2048)")
    p.add_argument("--policy", default="sinks", help="full, window, sinks, h2o or sinks+h2o (default sinks)")
    p.add_argument("--budget", type=_budget, default=256, help="tokens kept (256) or a fraction of those seen (0.2)")
    p.add_argument("--n-sink", type=int, default=4, help="attention sinks for sinks and sinks+h2o (default 4)")
    p.add_argument("--recent", type=int, default=None, help="recent window of h2o policies (default budget/2)")
    p.add_argument("--positions", default="rolling", help="rolling (positions inside the cache) or original")
    p.add_argument("--chunk", type=int, default=1, help="tokens per forward (default 1: the exact protocol)")
    p.add_argument("--recompute", action="store_true",
                   help="also run the sliding window with re-computation at the same budget (slow: O(T x budget))")
    p.add_argument("--no-dense", action="store_true", help="skip the dense baseline")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, help="output folder")


def cmd_stream(args, argv: list[str]) -> int:
    from attnlab.experiments.runner import RunContext, check_device, staged_output
    from attnlab.kv.experiments import load_stream, stream_figure
    from attnlab.kv.cache import PolicyCache
    from attnlab.evals.streaming import recompute_nll, stream_nll
    from attnlab.kv.policies import make_policy

    if args.tokens < 2 or args.chunk < 1:
        raise UsageError("--tokens must be >= 2 and --chunk >= 1")
    policy = make_policy(args.policy, None if args.policy == "full" else args.budget, args.n_sink, args.recent)
    device = check_device(args.device)
    ctx = RunContext(out=None, device=device)
    model, ids = load_stream(args.model, args.text, args.tokens, ctx, fix="--text PATH")
    cache = PolicyCache(model, policy, args.positions)  # refuses rolling on learned positions, before any work
    with staged_output(args.out) as stage:
        ctx.out = stage
        runs = {}
        with ctx.progress(len(ids) - 1, policy.describe()) as bar:
            runs[policy.describe()] = stream_nll(model, ids, cache, args.chunk, bar)
        if not args.no_dense:
            with ctx.progress(len(ids) - 1, "dense") as bar:
                runs["dense"] = stream_nll(model, ids, PolicyCache(model, make_policy("full")), 256, bar)
        if args.recompute and isinstance(policy.budget, int):
            with ctx.progress(len(ids) - 1, "recompute") as bar:
                runs[f"recompute window {policy.budget}"] = recompute_nll(model, ids, policy.budget, progress=bar)
        stream_figure(ctx, runs, {}, model.config.max_position_embeddings, "stream.png")
        metrics = {"command": "attnlab " + " ".join(shlex.quote(a) for a in argv),
                   "model": args.model, "text": args.text, "tokens": int(ids.numel()), "positions": args.positions,
                   "chunk": args.chunk,
                   "runs": {k: {"ppl": r.ppl, "tokens_per_s": r.tokens_per_s, "seconds": r.seconds,
                                "kv_bytes_final": r.kv_bytes[-1][1] if r.kv_bytes else None,
                                "kv_bytes_max": max(v for _, v in r.kv_bytes) if r.kv_bytes else None}
                            for k, r in runs.items()},
                   "claims": []}
        (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (stage / "nll.json").write_text(json.dumps({k: r.nll.round(5).tolist() for k, r in runs.items()}) + "\n")
    for k, r in runs.items():
        kv = f", KV {r.kv_bytes[-1][1] / 2**20:.1f} MiB" if r.kv_bytes else ""
        print(f"{k}: PPL {r.ppl:.3f}, {r.tokens_per_s:.1f} tokens/s{kv}")
    print(f"results: {args.out}/metrics.json, {args.out}/stream.png", file=sys.stderr)
    return 0
