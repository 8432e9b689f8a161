"""``dejavu-curve``: is SmolLM2's top half of |h| unpredictable from x, or were its predictors undertrained?

``dejavu`` trained SmolLM2's predictors on 49k tokens for 2 epochs (Deja Vu: ~400k tokens, 20 epochs) and found
recall 0.65 at keep 0.5; the README concluded the set "is not predictable from x". This measures the curve
instead: predictors from the layer's own input at ``ranks``, trained on growing chunks of local text
(:mod:`attnlab.sparsity.curve`; never the evaluation split), scored after each chunk on held-out text --
recall of the oracle's top-``keep`` set and |h| mass captured, per rank and training tokens. Any model the
adapter knows (``model=``; a ReLU model saved by ``dejavu-relu`` too).

Claims, fixed before the first run: Deja Vu's (recall >= ``recall_min`` at the largest budget), and the README's
statement as two that can fail -- more tokens do not help, more rank does not help. Restated (issue 52) as the
slopes of the curve, where they were first differences (recall at the most tokens minus at the fewest <= 0.05,
which held while recall still rose): the least-squares fit recall = a + b log2(tokens) + c log2(rank) over the
curve's points, each slope (recall a doubling adds) <= ``rise_max`` (0: no rise), decided by its 95% interval
over the layers (:func:`~attnlab.sparsity.curve.slope_intervals`; holds, fails or unresolved). Where they fail,
the README's conclusion is withdrawn for the curve. Besides, one any scale can decide: the predictor beats
chance (recall >= the keep, a set drawn without x). The quick scale (a few thousand tokens, one small rank)
decides only that one; the others are unresolved there, with the reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import Claim, check, finding
from attnlab.experiments.registry import Result, register
from attnlab.methods.configured import WEIGHTS_AND_ROPE, configured, enter_configured, methods_option
from attnlab.sparsity.configs import UNDER_WHY
from attnlab.sparsity.curve import (
    check_checkpoints,
    doublings_to,
    learning_curve,
    mean_interval,
    slope_intervals,
    slopes,
)
from attnlab.sparsity.measure import load_texts
from attnlab.sparsity.plots import curve_figure
from attnlab.sparsity.predictors import check_fits
from attnlab.sparsity.rules import keep_count

TALK_ORDER = 4  # after dejavu-relu


@dataclass(frozen=True)
class DejaVuCurveConfig:
    model: str = "smollm2"
    text: str = "wikitext-2/test.txt"  # evaluation
    train_texts: tuple[str, ...] = ("wikitext-2/valid.txt", "kjv", "war-and-peace")  # never the evaluation split
    tokens: int = 4096
    window: int = 512
    keep: float = 0.5
    ranks: tuple[int, ...] = (128, 512)
    checkpoints: tuple[int, ...] = (24576, 65536, 196608)
    epochs: int = 1
    batch: int = 128
    lr: float = 3e-3
    judge: bool = True  # False (quick): a few thousand tokens decide only that the predictor beats chance
    # claims, fixed before the first run
    recall_min: float = 0.9  # Deja Vu's, on OPT
    rise_max: float = 0.0  # the README's "not predictable": a doubling of tokens (of rank) lifts recall by <= this

    methods: tuple[str, ...] = methods_option()  # weights and RoPE methods the rules are measured under

    METHOD_KINDS: ClassVar = WEIGHTS_AND_ROPE
    METHOD_WHY: ClassVar = UNDER_WHY

    def __post_init__(self):
        configured(self)  # an unknown method or option, or a KV method: one line, before the model loads
        keep_count(1, self.keep)
        if self.keep == 1.0:
            raise ConfigError("keep=1.0 keeps every neuron: there is nothing to predict; use e.g. keep=0.5")
        if not self.ranks or min(self.ranks) < 1 or list(self.ranks) != sorted(set(self.ranks)):
            raise ConfigError(f"ranks={self.ranks}: give increasing ranks >= 1, e.g. ranks=128,512")
        if min(self.tokens, self.epochs, self.batch) < 1 or self.window < 2:
            raise ConfigError("tokens, epochs and batch must be >= 1, window >= 2")
        check_checkpoints(self.checkpoints, float("inf"))


BOOTSTRAP = "bootstrap over layers, 95%"


def _fit(rows: list[dict]) -> dict:
    """The curve as a line (:func:`~attnlab.sparsity.curve.slopes`) and its slopes' intervals over the layers."""
    return {"slopes": slopes(rows), "intervals": {t: list(i) for t, i in slope_intervals(rows).items()},
            "model": "recall = a + b log2(tokens) + c log2(rank), least squares over the points; intervals: "
                     + BOOTSTRAP}


def _claims(cfg: DejaVuCurveConfig, rows: list[dict], fit: dict) -> list:
    hi_r, hi_t = cfg.ranks[-1], cfg.checkpoints[-1]
    best = next(r for r in rows if (r["rank"], r["tokens"]) == (hi_r, hi_t))
    layers = len(best["recall_per_layer"])
    setting = f"rank {hi_r}, {hi_t:,} tokens x {cfg.epochs} epoch(s)"
    spread = mean_interval(best["recall_per_layer"])
    out = [check(f"{cfg.model}: the predictor (own input, {setting}) recalls >= {cfg.recall_min:g} of the oracle's top "
                 f"{cfg.keep:.0%} set, mean over layers (Deja Vu, on OPT; chance {cfg.keep:g})", best["recall"],
                 cfg.recall_min, 0, "at_least", interval=spread, n=layers, method=BOOTSTRAP)]
    out += _slope_claims(cfg, rows, fit, best, layers)
    if not cfg.judge:  # the quick scale: only chance is its to decide
        why = (f"this curve ({', '.join(f'{t:,}' for t in cfg.checkpoints)} tokens, rank(s) "
               f"{', '.join(map(str, cfg.ranks))}) is far below Deja Vu's budget and the README's: a quick scale "
               "cannot decide this")
        out = [_undecided(c, why) for c in out]
    out.insert(1, check(f"x predicts the set at all: the predictor ({setting}) recalls >= chance ({cfg.keep:g}: a set "
                        "of the same size drawn without x), mean over layers", best["recall"], cfg.keep, 0, "at_least",
                        interval=spread, n=layers, method=BOOTSTRAP))
    return out + [finding(f"rank {r['rank']}, {r['tokens']:,} tokens: |h| mass the predicted set captures (the "
                          f"oracle's {r['oracle_mass']:.3f}; recall {r['recall']:.3f})", r["mass"]) for r in rows]


def _slope_claims(cfg: DejaVuCurveConfig, rows: list[dict], fit: dict, best: dict, layers: int) -> list:
    """The README's 'not predictable from x' as the curve's slopes, per doubling of tokens and of rank."""
    said = {"tokens": ("(a) more tokens do not help", f"training tokens {', '.join(f'{t:,}' for t in cfg.checkpoints)}",
                       "undertrained at these budgets rather than shown unpredictable"),
            "rank": ("(b) more rank does not help", f"ranks {', '.join(map(str, cfg.ranks))}",
                     "a larger predictor still finds more of the set: its capacity, not x, limits recall here")}
    out = []
    for term, slope in fit["slopes"].items():
        (what, over, reading), (lo, hi) = said[term], fit["intervals"][term]
        other = next((f", log2({t}) fitted beside it" for t in fit["slopes"] if t != term), "")
        c = check(f"the README's 'not predictable from x', {what}: recall a doubling of {term} adds (least-squares "
                  f"slope on log2({term}){other}; {over}; {len(rows)} points)",
                  slope, 0, cfg.rise_max, "at_most", interval=(lo, hi), n=layers, method=BOOTSTRAP)
        need = doublings_to(cfg.recall_min, best["recall"], slope)
        reach = (f"; on this line, recall {cfg.recall_min:g} is {need:.0f} more doublings of the tokens away"
                 if term == "tokens" and math.isfinite(need) else "")
        out.append(c.failing_because(f"recall still rises with {term}, by {slope:.4f} a doubling (95% {lo:.4f}.."
                                     f"{hi:.4f}): {reading}{reach}")
                   .unresolved_because(f"the interval {lo:.4f}..{hi:.4f} holds both a rise and none: more points or "
                                       "layers would decide"))
    return out


def _undecided(c: Claim, why: str) -> Claim:
    """A claim this scale cannot decide: unresolved, its measurement kept, the reason its note."""
    return Claim(c.claim, c.measured, c.expected, c.tolerance, None, c.test, note=why)


@register("dejavu-curve", "Deja Vu's predictors on a model (default SmolLM2): recall of the oracle set and |h| mass "
          "vs rank and training tokens -- unpredictable, or undertrained?", DejaVuCurveConfig,
          quick={"tokens": 256, "window": 128, "ranks": (16,), "checkpoints": (512, 1024), "batch": 64,
                 "judge": False})
def run_dejavu_curve(cfg: DejaVuCurveConfig, ctx) -> Result:
    model, ids, train_ids = load_texts(cfg.model, cfg.text, cfg.tokens, cfg.train_texts, cfg.checkpoints[-1],
                                       ctx.device)
    enter_configured(cfg, model, None, ctx)  # predictors trained on, and scored on, the model the methods leave
    check_fits(model, max(cfg.ranks), ("neurons",), cfg.batch, cfg.window)
    with ctx.progress(len(cfg.ranks) * cfg.checkpoints[-1] * cfg.epochs, "predictors (ranks x tokens)") as bar:
        rows, final = learning_curve(model, cfg.model, train_ids, ids, cfg.ranks, cfg.checkpoints, cfg.keep,
                                     epochs=cfg.epochs, window=cfg.window, batch=cfg.batch, lr=cfg.lr, progress=bar)
    curve_figure(ctx, rows, cfg.keep, name="dejavu_curve.png")
    table = ["| rank | training tokens | recall | \\|h\\| mass | oracle's mass |", "|---|---|---|---|---|"]
    table += [f"| {r['rank']} | {r['tokens']:,} | {r['recall']:.3f} | {r['mass']:.3f} | {r['oracle_mass']:.3f} |"
              for r in rows]
    summary = (f"{cfg.model}: predictors from each layer's own input, trained on {cfg.checkpoints[-1]:,} tokens of "
               f"{', '.join(cfg.train_texts)} in chunks ({cfg.epochs} epoch(s) each), scored after each on "
               f"{cfg.tokens:,} tokens of {cfg.text} at keep {cfg.keep:g}.\n\n" + "\n".join(table))
    figures = {"dejavu_curve.png": "Recall of the oracle's top-k set (solid) and |h| mass captured (dotted) by the "
               "predicted set against training tokens, one line per rank; chance (the keep) dashed."}
    fit = _fit(rows)
    return Result(_claims(cfg, rows, fit), {"curve": rows, "fit": fit, "cost": {r: p.cost() for r, p in final.items()}},
                  figures, summary)
