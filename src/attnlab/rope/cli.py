"""``attnlab passkey`` and ``attnlab longppl``: context extension by RoPE scaling, measured on any
RoPE model — passkey retrieval over a grid of lengths × depths, and sliding-window perplexity at
several context lengths, one run per scaling, side by side."""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from attnlab.core.errors import UsageError

SCALING_HELP = ("comma-separated RoPE scalings: none, pi (linear interpolation), ntk (NTK-aware base), "
                "dynamic-ntk (factor from the current length), yarn (default: all five)")
EPILOG = """examples:
  attnlab models fetch smollm2        # once: SmolLM2-135M (trained context 8,192)
  attnlab passkey --model smollm2 --factor 2 --lengths 4096,8192,16384 --depths 0,0.5,1 --out runs/passkey
  attnlab longppl --model smollm2 --factor 2 --lengths 2048,8192,16384 --windows 2 --out runs/longppl
  attnlab longppl --model runs/llama/model --scalings none,pi --factor 4 --lengths 256,1024 --out runs/lp

--factor s is the target context over the trained one (s >= 1); every scaling but none uses it.
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


def _common(p) -> None:
    p.add_argument("--model", default="smollm2", help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--scalings", default="none,pi,ntk,dynamic-ntk,yarn", help=SCALING_HELP)
    p.add_argument("--factor", type=float, default=2.0, help="s = target context / trained context (default 2)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, help="output folder (metrics.json and a figure)")


def add_parser(sub) -> None:
    kw = dict(formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG.replace("{cpu}", CPU_COST))
    p = sub.add_parser("passkey", help="passkey retrieval grid under RoPE scalings", description=__doc__, **kw)
    _common(p)
    p.add_argument("--lengths", type=_ints, default=(4096, 8192, 16384), help="prompt lengths in tokens")
    p.add_argument("--depths", type=_floats, default=(0.0, 0.5, 1.0), help="key depths in [0, 1]")
    p.add_argument("--samples", type=int, default=2, help="prompts per (length, depth), each its own key")
    p.add_argument("--seed", type=int, default=0, help="draws the keys (default 0)")
    q = sub.add_parser("longppl", help="sliding-window perplexity at several context lengths under RoPE scalings",
                       description=__doc__, **kw)
    _common(q)
    q.add_argument("--text", default="war-and-peace", help="a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    q.add_argument("--lengths", type=_ints, default=(2048, 4096, 8192, 16384), help="context lengths in tokens")
    q.add_argument("--stride", type=int, default=256, help="window stride = tokens scored per window (256)")
    q.add_argument("--tokens", type=int, default=None,
                   help="tokens of the text the windows slide over (default: twice the longest length)")
    q.add_argument("--windows", type=int, default=2,
                   help="scored blocks, evenly spaced, each scored at every length (default 2; 0: every "
                        "stride, the full protocol)")


def cmd_rope(args, argv: list[str]) -> int:
    from attnlab.experiments.runner import RunContext, check_device, staged_output
    from attnlab.rope import experiments as exp_rope
    from attnlab.kv.experiments import load_model, text_ids
    from attnlab.evals.passkey import passkey_cases
    from attnlab.rope.apply import ScaledRope

    scalings = exp_rope.load_scalings([s.strip() for s in args.scalings.split(",") if s.strip()], args.factor)
    ctx = RunContext(out=None, device=check_device(args.device))
    if args.command == "passkey":
        if args.samples < 1 or any(not 0 <= d <= 1 for d in args.depths):
            raise UsageError("--samples must be >= 1 and --depths lie in [0, 1]")
    elif args.stride < 1 or args.windows < 0 or min(args.lengths) < args.stride:
        raise UsageError(f"need --stride >= 1, --windows >= 0 and every length >= the stride ({args.stride})")
    elif args.tokens is not None and args.tokens < max(args.lengths):
        raise UsageError(f"--tokens {args.tokens} is shorter than the longest length {max(args.lengths)}")
    model, tok = load_model(args.model, ctx)
    for s in scalings:
        ScaledRope(model, s)  # refuses models without (plain) RoPE before any text is read
    trained = model.config.max_position_embeddings
    metrics = {"command": "attnlab " + " ".join(shlex.quote(a) for a in argv), "model": args.model,
               "trained_context": trained, "factor": args.factor, "claims": []}
    if args.command == "passkey":
        cases = passkey_cases(args.lengths, args.depths, args.samples, args.seed)
        with staged_output(args.out) as stage:
            ctx.out = stage
            results = exp_rope.run_passkey(model, tok, scalings, cases, ctx)
            exp_rope.passkey_figure(ctx, results, trained)
            metrics["passkey"] = exp_rope.passkey_metrics(results)
            (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        for name, rows in results.items():
            by_len = ", ".join(f"{n}: {exp_rope.accuracy_at(rows, n):.0%}" for n in args.lengths)
            print(f"{name}: passkey accuracy {by_len}")
        figure = "passkey.png"
    else:
        ids = text_ids(tok, args.text, args.tokens or 2 * max(args.lengths), fix="--text PATH")
        with staged_output(args.out) as stage:
            ctx.out = stage
            curves = exp_rope.run_longppl(model, ids, scalings, list(args.lengths), args.stride,
                                          args.windows or None, ctx)
            exp_rope.longppl_figure(ctx, curves, trained)
            metrics["ppl"] = {k: {str(n): c.ppl(n) for n in c.lengths} for k, c in curves.items()}
            (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        for name, c in curves.items():
            print(f"{name}: PPL " + ", ".join(f"{n}: {c.ppl(n):.2f}" for n in c.lengths))
        figure = "longppl.png"
    print(f"results: {args.out}/metrics.json, {args.out}/{figure}", file=sys.stderr)
    return 0
