"""``attnlab passkey`` and ``attnlab longppl``: context extension by RoPE scaling, measured on any
RoPE model — passkey retrieval over a grid of lengths × depths, and sliding-window perplexity at
several context lengths, one run per scaling, side by side."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.experiments.registry import Experiment, Result
from attnlab.rope.passkey import ALL_SCALINGS, FIGURE, PasskeyGrid, run_grid

GROUP = "inference"

SCALING_HELP = ("comma-separated RoPE scalings: none, pi (linear interpolation), ntk (NTK-aware base), "
                "dynamic-ntk (factor from the current length), yarn (default: all five)")
EPILOG = """examples:
  attnlab models fetch smollm2        # once: SmolLM2-135M (trained context 8,192)
  attnlab passkey --model smollm2 --factor 2 --lengths 4096,8192,16384 --depths 0,0.5,1 --out runs/passkey
  attnlab longppl --model smollm2 --factor 2 --lengths 2048,8192,16384 --windows 2 --out runs/longppl
  attnlab longppl --model runs/llama/model --scalings none,pi --factor 4 --lengths 256,1024 --out runs/lp

--factor s is the target context over the trained one (s >= 1); every scaling but none uses it.
Writes OUT/config.json, OUT/metrics.json, OUT/report.md and a figure (passkey.png, longppl.png).
A prompt of N tokens costs one prefill of N tokens per scaling: on a 2-core CPU about {cpu}."""
CPU_COST = "7 s at 4k, 19 s at 8k and 60 s at 16k tokens for SmolLM2 (benchmarks/README.md)"


def _ints(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated token counts, e.g. 4096,8192") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive token counts")
    return vals


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated depths in [0, 1], e.g. 0,0.5,1") from None


@dataclass(frozen=True)
class PasskeyRun(PasskeyGrid):
    """One ``attnlab passkey`` run: its flags, as the run's config (checked by :class:`PasskeyGrid`)."""


@dataclass(frozen=True)
class LongPPLRun:
    """One ``attnlab longppl`` run: its flags, as the run's config."""

    model: str = "smollm2"
    scalings: tuple[str, ...] = ALL_SCALINGS
    factor: float = 2.0
    text: str = "war-and-peace"
    lengths: tuple[int, ...] = (2048, 4096, 8192, 16384)
    stride: int = 256
    tokens: int | None = None  # None: twice the longest length
    windows: int = 2  # 0: every stride

    def __post_init__(self):
        from attnlab.rope.compare import load_scalings

        load_scalings(self.scalings, self.factor)
        if self.stride < 1:
            raise UsageError(f"--stride {self.stride}: score at least 1 token per window")
        if self.windows < 0:
            raise UsageError(f"--windows {self.windows}: give 0 (every stride) or a positive number of windows")
        if min(self.lengths) < self.stride:
            raise UsageError(f"--lengths {min(self.lengths)}: need every length >= the stride ({self.stride})")
        if self.tokens is not None and self.tokens < max(self.lengths):
            raise UsageError(f"--tokens {self.tokens} is shorter than the longest length {max(self.lengths)}")


def _model(cfg, ctx):
    """The model and tokenizer, refusing models without (plain) RoPE before any text is read."""
    from attnlab.evals.inputs import load_model
    from attnlab.rope.compare import load_scalings, scaled

    model, tok = load_model(cfg.model, ctx.device)
    scalings = load_scalings(cfg.scalings, cfg.factor)
    scaled(model, scalings)
    return model, tok, scalings


def run_passkey(cfg: PasskeyRun, ctx) -> Result:
    from attnlab.evals.passkey import passkey_metrics
    from attnlab.rope.compare import load_scalings

    trained, results = run_grid(cfg, load_scalings(cfg.scalings, cfg.factor), ctx)
    metrics = {"command": ctx.command, "model": cfg.model, "trained_context": trained, "factor": cfg.factor,
               "passkey": passkey_metrics(results)}
    lines = passkey_lines(metrics["passkey"], cfg.lengths)
    return Result([], metrics, dict(FIGURE), "\n".join(f"- {line}" for line in lines))


def run_longppl(cfg: LongPPLRun, ctx) -> Result:
    from attnlab.evals.inputs import text_ids
    from attnlab.rope.compare import longppl_by_scaling
    from attnlab.rope.plots import longppl_figure

    model, tok, scalings = _model(cfg, ctx)
    trained = model.config.max_position_embeddings
    ids = text_ids(tok, cfg.text, cfg.tokens or 2 * max(cfg.lengths), fix="--text PATH")
    curves = longppl_by_scaling(model, ids, scalings, list(cfg.lengths), cfg.stride, cfg.windows or None, ctx)
    longppl_figure(ctx, curves, trained)
    metrics = {"command": ctx.command, "model": cfg.model, "trained_context": trained, "factor": cfg.factor,
               "ppl": {k: {str(n): c.ppl(n) for n in c.lengths} for k, c in curves.items()}}
    lines = longppl_lines(metrics["ppl"])
    return Result([], metrics, {"longppl.png": f"sliding-window PPL (stride {cfg.stride}) against context length, "
                                "one curve per scaling"}, "\n".join(f"- {line}" for line in lines))


def passkey_lines(passkey: dict, lengths) -> list[str]:
    """One line per scaling: its accuracy at each prompt length (``passkey``: metrics.json's records)."""
    def accuracy(rows, n):
        cell = [r["correct"] for r in rows if r["length"] == n]
        return sum(cell) / len(cell)

    return [f"{name}: passkey accuracy " + ", ".join(f"{n}: {accuracy(rows, n):.0%}" for n in lengths)
            for name, rows in passkey.items()]


def longppl_lines(ppl: dict) -> list[str]:
    """One line per scaling: its PPL at each context length."""
    return [f"{name}: PPL " + ", ".join(f"{n}: {p:.2f}" for n, p in v.items()) for name, v in ppl.items()]


PASSKEY = Experiment("passkey", "passkey retrieval grid under RoPE scalings (ad hoc, no claims)", PasskeyRun,
                     run_passkey)
LONGPPL = Experiment("longppl", "sliding-window perplexity at several context lengths under RoPE scalings (ad hoc, "
                     "no claims)", LongPPLRun, run_longppl)


def _common(p) -> None:
    p.add_argument("--model", default=PasskeyRun.model,
                   help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--scalings", default=",".join(PasskeyRun.scalings), help=SCALING_HELP)
    p.add_argument("--factor", type=float, default=PasskeyRun.factor,
                   help="s = target context / trained context (default 2)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, type=Path, help="output folder (metrics.json, report.md and a figure)")


def add_commands(sub) -> None:
    kw = dict(formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG.replace("{cpu}", CPU_COST))
    p = sub.add_parser("passkey", help="passkey retrieval grid under RoPE scalings", description=__doc__, **kw)
    _common(p)
    p.add_argument("--lengths", type=_ints, default=PasskeyRun.lengths, help="prompt lengths in tokens")
    p.add_argument("--depths", type=_floats, default=PasskeyRun.depths, help="key depths in [0, 1]")
    p.add_argument("--samples", type=int, default=PasskeyRun.samples,
                   help="prompts per (length, depth), each its own key")
    p.add_argument("--seed", type=int, default=PasskeyRun.seed, help="draws the keys (default 0)")
    p.set_defaults(func=cmd_passkey)
    q = sub.add_parser("longppl", help="sliding-window perplexity at several context lengths under RoPE scalings",
                       description=__doc__, **kw)
    _common(q)
    q.add_argument("--text", default=LongPPLRun.text, help="a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    q.add_argument("--lengths", type=_ints, default=LongPPLRun.lengths, help="context lengths in tokens")
    q.add_argument("--stride", type=int, default=LongPPLRun.stride,
                   help="window stride = tokens scored per window (256)")
    q.add_argument("--tokens", type=int, default=None,
                   help="tokens of the text the windows slide over (default: twice the longest length)")
    q.add_argument("--windows", type=int, default=LongPPLRun.windows,
                   help="scored blocks, evenly spaced, each scored at every length (default 2; 0: every "
                        "stride, the full protocol)")
    q.set_defaults(func=cmd_longppl)


def _scalings(args) -> tuple[str, ...]:
    return tuple(s.strip() for s in args.scalings.split(",") if s.strip())


def _run(exp: Experiment, cfg, args) -> Result:
    from attnlab.experiments.runner import check_device, command_line, run_into

    return run_into(exp, cfg, args.out, check_device(args.device), command_line(args.argv))


def cmd_passkey(args) -> int:
    cfg = PasskeyRun(args.model, _scalings(args), args.factor, args.lengths, args.depths, args.samples, args.seed)
    result = _run(PASSKEY, cfg, args)
    print("\n".join(passkey_lines(result.metrics["passkey"], cfg.lengths)))
    print(f"results: {args.out}/metrics.json, {args.out}/passkey.png, {args.out}/report.md", file=sys.stderr)
    return 0


def cmd_longppl(args) -> int:
    cfg = LongPPLRun(args.model, _scalings(args), args.factor, args.text, args.lengths, args.stride, args.tokens,
                     args.windows)
    result = _run(LONGPPL, cfg, args)
    print("\n".join(longppl_lines(result.metrics["ppl"])))
    print(f"results: {args.out}/metrics.json, {args.out}/longppl.png, {args.out}/report.md", file=sys.stderr)
    return 0
