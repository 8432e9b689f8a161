"""``attnlab sink-table``: StreamingLLM's sink table for any causal LM -- stream a text token by token
through caches n + (W - n) (n sinks kept, the rest a recent window; positions rolling) and print the
perplexity of each, beside the published 160M numbers. A model pre-trained with a sink token (attnlab
train --attention sink-token) gets its sink first; its 0+W cache then evicts it, on purpose.

To pre-train the variants and compare them, run ``attnlab reproduce sink-pretraining``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.experiments.registry import Experiment, Result

GROUP = "inference"

EPILOG = """examples:
  attnlab sink-table --model smollm2 --text kjv --window 256 --out runs/sinks-smollm2
  attnlab sink-table --model runs/sink-token/model --text war-and-peace --window 128 --sinks 0,1,4 --out runs/st
Writes OUT/metrics.json (PPL per cache), OUT/sink_table.png and OUT/report.md."""


@dataclass(frozen=True)
class SinkTableRun:
    model: str = "smollm2"
    text: str = "kjv"
    tokens: int = 2048
    window: int = 256
    sinks: tuple[int, ...] = (0, 1, 2, 4)

    def __post_init__(self):
        if not self.sinks or min(self.sinks) < 0 or max(self.sinks) >= self.window:
            raise UsageError(f"--sinks {','.join(map(str, self.sinks))} with --window {self.window}: each must be "
                             f">= 0 and below the window (the cache holds n sinks + window - n recent tokens)")
        if self.tokens <= self.window:
            raise UsageError(f"--tokens {self.tokens} must exceed --window {self.window}, or no cache ever evicts")


def run_table(cfg: SinkTableRun, ctx) -> Result:
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.sinks.plots import table_figure
    from attnlab.sinks.table import PUBLISHED, label, ppl, sink_table

    model, tok = load_model(cfg.model, ctx.device)
    ids = text_ids(tok, cfg.text, cfg.tokens, "--text PATH")  # sink_table puts a sink token first itself
    with ctx.progress(len(cfg.sinks) * (ids.numel() - 1), "stream") as bar:
        nll = sink_table(model, ids, cfg.window, cfg.sinks, bar)
    row = {n: ppl(x) for n, x in nll.items()}
    ctx.savefig(table_figure({cfg.model: row}, cfg.window, PUBLISHED), "sink_table.png")
    metrics = {"model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()), "window": cfg.window,
               "ppl": {label(n, cfg.window): p for n, p in row.items()}}
    summary = "\n".join(f"- {label(n, cfg.window)}: PPL {p:.3f}" for n, p in row.items())
    return Result([], metrics, {"sink_table.png": "Streaming PPL through each cache n+(W-n), beside the published "
                                                  "160M pre-training table"}, summary)


SINK_TABLE = Experiment("sink-table", "StreamingLLM's sink table for one model", SinkTableRun, run_table)


def _sinks(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated sink counts, e.g. 0,1,2,4") from None


def add_commands(sub) -> None:
    p = sub.add_parser("sink-table", help="stream a model through caches n+(W-n): how many attention sinks it needs",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=SinkTableRun.model, help="alias (smollm2), model folder or attnlab train run")
    p.add_argument("--text", default=SinkTableRun.text, help="a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    p.add_argument("--tokens", type=int, default=SinkTableRun.tokens, help="stream length in tokens (default 2048)")
    p.add_argument("--window", type=int, default=SinkTableRun.window, help="cache size W (default 256)")
    p.add_argument("--sinks", type=_sinks, default=SinkTableRun.sinks, help="sink counts n (default 0,1,2,4)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.set_defaults(func=cmd_sink_table)


def cmd_sink_table(args) -> int:
    from attnlab.experiments.runner import check_device, command_line, run_into

    cfg = SinkTableRun(args.model, args.text, args.tokens, args.window, args.sinks)
    result = run_into(SINK_TABLE, cfg, args.out, check_device(args.device), command_line(args.argv))
    for k, p in result.metrics["ppl"].items():
        print(f"{k}: PPL {p:.3f}")
    print(f"results: {args.out}/metrics.json, {args.out}/sink_table.png, {args.out}/report.md", file=sys.stderr)
    return 0
