"""RoPE scalings compared: one evaluation of one model (the passkey grid, long-context perplexity),
run under each scaling in turn. What the RoPE experiments (``attnlab passkey`` / ``longppl`` among them) run."""
from __future__ import annotations

from attnlab.evals.compare import under_each
from attnlab.evals.longppl import LongPPL, long_ppl
from attnlab.evals.passkey import PasskeyCase, PasskeyResult, build_prompts, check_fits, passkey_grid
from attnlab.rope.apply import ScaledRope
from attnlab.rope.scalings import RopeScaling, make_scaling


def load_scalings(names, factor: float) -> list[RopeScaling]:
    """The scalings by name, each at ``factor`` (none at 1)."""
    return [make_scaling(n, 1.0 if n == "none" else factor) for n in names]


def scaled(model, scalings: list[RopeScaling]) -> dict[str, ScaledRope]:
    """label -> the scaling as a method on ``model``; refuses models without (plain) RoPE."""
    return {s.describe(): ScaledRope(model, s) for s in scalings}


def passkey_by_scaling(model, tok, scalings: list[RopeScaling], cases: list[PasskeyCase], ctx
                       ) -> dict[str, list[PasskeyResult]]:
    """Every case under every scaling: one prefill per (case, scaling), prompts tokenised once."""
    methods = scaled(model, scalings)
    check_fits(model.config, max(c.length for c in cases), ctx.device)  # refuse now, not after an hour
    prompts = build_prompts(tok, cases)
    with ctx.progress(len(cases) * len(scalings), "passkey") as bar:
        return under_each(methods, lambda _: passkey_grid(model, tok, prompts, bar))


def longppl_by_scaling(model, ids, scalings: list[RopeScaling], lengths: list[int], stride: int,
                       windows: int | None, ctx) -> dict[str, LongPPL]:
    """Sliding-window perplexity of ``ids`` (T,) at each length, under every scaling; ``windows`` scored
    blocks, or every stride (the full protocol) for 0 or None."""
    methods = scaled(model, scalings)
    check_fits(model.config, max(lengths), ctx.device)

    def evaluate(label: str) -> LongPPL:
        with ctx.progress((windows or 0) * len(lengths), f"longppl {label}") as bar:
            return long_ppl(model, ids, lengths, stride, windows or None, progress=bar)

    return under_each(methods, evaluate)
