"""``attnlab stream``: stream a text through a model with one KV-cache policy and measure it:
perplexity (token by token, as StreamingLLM and H2O evaluate), KV bytes and decode tokens/s,
beside the dense cache (and, on request, the sliding window with re-computation)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.experiments.registry import Experiment, Result

GROUP = "inference"

EPILOG = """examples:
  attnlab models fetch smollm2                    # once: the real model, into the cache
  attnlab stream --model smollm2 --policy sinks --budget 256 --out runs/sinks
  attnlab stream --model smollm2 --policy sinks+h2o --budget 256 --recent 128 --tokens 4096 --out runs/sh2o
  attnlab stream --model smollm2 --policy h2o --budget 0.2 --positions original --out runs/h2o20
  attnlab stream --model runs/llama/model --text war-and-peace --policy window --budget 128 --out runs/w

policies: full, window, sinks (StreamingLLM), h2o (heavy hitters + recent), sinks+h2o (StreamH2O).
--chunk N feeds N tokens per forward: exact for the dense cache, an approximation for the
evicting ones (a chunk sees the cache as it was before the chunk), and much faster on a CPU.
Writes OUT/config.json, OUT/metrics.json, OUT/report.md, OUT/stream.png (NLL per position, KV
bytes) and OUT/nll.json."""


@dataclass(frozen=True)
class StreamRun:
    """One ``attnlab stream`` run: its flags, as the run's config."""

    model: str = "smollm2"
    text: str = "kjv"
    tokens: int = 2048
    policy: str = "sinks"
    budget: int | float = 256
    n_sink: int = 4
    recent: int | None = None
    positions: str = "rolling"
    chunk: int = 1
    recompute: bool = False
    dense: bool = True

    def __post_init__(self):
        if self.tokens < 2:
            raise UsageError(f"--tokens {self.tokens}: stream at least 2 tokens")
        if self.chunk < 1:
            raise UsageError(f"--chunk {self.chunk}: feed at least 1 token per forward")
        self.make_policy()  # an unknown policy or impossible budget: refused before any work

    def make_policy(self):
        from attnlab.kv.policies import make_policy

        return make_policy(self.policy, self.budget, self.n_sink, self.recent)  # full ignores the budget


def run_stream(cfg: StreamRun, ctx) -> Result:
    """The policy's stream, the dense one and (on request) the recomputed window: NLL, bytes, speed."""
    from attnlab.evals.inputs import load_stream
    from attnlab.evals.streaming import recompute_nll, stream_nll
    from attnlab.kv.cache import PolicyCache, check_sink_slot
    from attnlab.kv.plots import stream_figure
    from attnlab.kv.policies import make_policy

    policy = cfg.make_policy()
    model, ids = load_stream(cfg.model, cfg.text, cfg.tokens, ctx.device, fix="--text PATH")
    check_sink_slot(model, policy)
    cache = PolicyCache(model, policy, cfg.positions)  # refuses rolling on learned positions, before any work
    runs = {}
    with ctx.progress(len(ids) - 1, policy.describe()) as bar:
        runs[policy.describe()] = stream_nll(model, ids, cache, cfg.chunk, bar)
    if cfg.dense:
        with ctx.progress(len(ids) - 1, "dense") as bar:
            runs["dense"] = stream_nll(model, ids, PolicyCache(model, make_policy("full")), 256, bar)
    if cfg.recompute and isinstance(policy.budget, int):
        with ctx.progress(len(ids) - 1, "recompute") as bar:
            runs[f"recompute window {policy.budget}"] = recompute_nll(model, ids, policy.budget, progress=bar)
    stream_figure(ctx, runs, {}, model.config.max_position_embeddings, "stream.png")
    (ctx.out / "nll.json").write_text(json.dumps({k: r.nll.round(5).tolist() for k, r in runs.items()}) + "\n")
    metrics = {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
               "positions": cfg.positions, "chunk": cfg.chunk,
               "runs": {k: {"ppl": r.ppl, "tokens_per_s": r.tokens_per_s, "seconds": r.seconds,
                            "kv_bytes_final": r.kv_bytes[-1][1] if r.kv_bytes else None,
                            "kv_bytes_max": max(v for _, v in r.kv_bytes) if r.kv_bytes else None}
                        for k, r in runs.items()}}
    summary = "\n".join(f"- {line}" for line in result_lines(metrics["runs"]))
    return Result([], metrics, {"stream.png": "NLL per position (mean over 64-token windows), KV bytes stored and "
                                "decode tokens/s along the stream, one line per cache"}, summary)


def result_lines(runs: dict) -> list[str]:
    """One line per cache: PPL, tokens/s and the KV bytes it ended with."""
    lines = []
    for k, r in runs.items():
        kv = f", KV {r['kv_bytes_final'] / 2**20:.1f} MiB" if r["kv_bytes_final"] is not None else ""
        lines.append(f"{k}: PPL {r['ppl']:.3f}, {r['tokens_per_s']:.1f} tokens/s{kv}")
    return lines


STREAM = Experiment("stream", "streaming perplexity, memory and speed of one KV-cache policy", StreamRun, run_stream)


def _budget(text: str) -> int | float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give tokens (256) or a fraction (0.2)") from None
    return int(v) if v >= 1 and v.is_integer() else v


def add_commands(sub) -> None:
    p = sub.add_parser("stream", help="streaming perplexity, memory and speed of a KV-cache policy on a real model",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=StreamRun.model,
                   help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--text", default=StreamRun.text, help="a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    p.add_argument("--tokens", type=int, default=StreamRun.tokens, help="stream length in tokens (default 2048)")
    p.add_argument("--policy", default=StreamRun.policy, help="full, window, sinks, h2o or sinks+h2o (default sinks)")
    p.add_argument("--budget", type=_budget, default=StreamRun.budget,
                   help="tokens kept (256) or a fraction of those seen (0.2)")
    p.add_argument("--n-sink", type=int, default=StreamRun.n_sink,
                   help="attention sinks for sinks and sinks+h2o (default 4)")
    p.add_argument("--recent", type=int, default=None, help="recent window of h2o policies (default budget/2)")
    p.add_argument("--positions", default=StreamRun.positions, help="rolling (positions inside the cache) or original")
    p.add_argument("--chunk", type=int, default=StreamRun.chunk,
                   help="tokens per forward (default 1: the exact protocol)")
    p.add_argument("--recompute", action="store_true",
                   help="also run the sliding window with re-computation at the same budget (slow: O(T x budget))")
    p.add_argument("--no-dense", action="store_true", help="skip the dense baseline")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.set_defaults(func=cmd_stream)


def cmd_stream(args) -> int:
    from attnlab.experiments.runner import check_device, command_line, run_into

    cfg = StreamRun(args.model, args.text, args.tokens, args.policy, args.budget, args.n_sink, args.recent,
                    args.positions, args.chunk, args.recompute, not args.no_dense)
    result = run_into(STREAM, cfg, args.out, check_device(args.device), command_line(args.argv))
    for line in result_lines(result.metrics["runs"]):
        print(line)
    print(f"results: {args.out}/metrics.json, {args.out}/stream.png, {args.out}/report.md", file=sys.stderr)
    return 0
