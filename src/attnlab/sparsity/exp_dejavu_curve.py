"""``dejavu-curve``: is SmolLM2's top half of |h| unpredictable from x, or were its predictors undertrained?

``dejavu`` trained SmolLM2's predictors on 49k tokens for 2 epochs (Deja Vu: ~400k tokens, 20 epochs) and found
recall 0.65 at keep 0.5; the README concluded the set "is not predictable from x". This measures the curve
instead: predictors from the layer's own input at ``ranks``, trained on growing chunks of local text
(:mod:`attnlab.sparsity.curve`; never the evaluation split), scored after each chunk on held-out text --
recall of the oracle's top-``keep`` set and |h| mass captured, per rank and training tokens. Any model the
adapter knows (``model=``; a ReLU model saved by ``dejavu-relu`` too).

Claims, fixed before the first run: Deja Vu's (recall >= ``recall_min`` at the largest budget), and the README's
statement as two that can fail -- more tokens do not help (recall at the most tokens minus at the fewest, the
largest rank, <= ``flat``) and more rank does not help (the largest rank minus the smallest, the most tokens,
<= ``flat``). Where they fail, the README's conclusion is withdrawn for the curve.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check, finding
from attnlab.experiments.registry import Result, register
from attnlab.sparsity.curve import check_checkpoints, learning_curve
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
    judge: bool = True  # False (quick): a predictor trained on a few thousand tokens decides nothing
    # claims, fixed before the first run
    recall_min: float = 0.9  # Deja Vu's, on OPT
    flat: float = 0.05  # the README's "not predictable": neither tokens nor rank lift recall by more than this

    def __post_init__(self):
        keep_count(1, self.keep)
        if self.keep == 1.0:
            raise ConfigError("keep=1.0 keeps every neuron: there is nothing to predict; use e.g. keep=0.5")
        if not self.ranks or min(self.ranks) < 1 or list(self.ranks) != sorted(set(self.ranks)):
            raise ConfigError(f"ranks={self.ranks}: give increasing ranks >= 1, e.g. ranks=128,512")
        if min(self.tokens, self.epochs, self.batch) < 1 or self.window < 2:
            raise ConfigError("tokens, epochs and batch must be >= 1, window >= 2")
        check_checkpoints(self.checkpoints, float("inf"))


def _claims(cfg: DejaVuCurveConfig, rows: list[dict]) -> list:
    judged = check if cfg.judge else (lambda claim, measured, *_: finding(claim, measured))
    at = {(r["rank"], r["tokens"]): r["recall"] for r in rows}
    lo_r, hi_r, lo_t, hi_t = cfg.ranks[0], cfg.ranks[-1], cfg.checkpoints[0], cfg.checkpoints[-1]
    best = at[hi_r, hi_t]
    out = [judged(f"{cfg.model}: the predictor (own input, rank {hi_r}, {hi_t:,} tokens x {cfg.epochs} epoch(s)) "
                  f"recalls >= {cfg.recall_min:g} of the oracle's top {cfg.keep:.0%} set, mean over layers (Deja Vu, "
                  f"on OPT; chance {cfg.keep:g})", best, cfg.recall_min, 0, "at_least")]
    if len(cfg.checkpoints) > 1:
        out.append(judged(f"the README's 'not predictable from x', (a) more tokens do not help: rank {hi_r}'s recall "
                          f"at {hi_t:,} tokens minus at {lo_t:,} ({best:.3f} - {at[hi_r, lo_t]:.3f})",
                          best - at[hi_r, lo_t], cfg.flat, 0, "at_most"))
    if len(cfg.ranks) > 1:
        out.append(judged(f"the README's 'not predictable from x', (b) more rank does not help: at {hi_t:,} tokens, "
                          f"rank {hi_r}'s recall minus rank {lo_r}'s ({best:.3f} - {at[lo_r, hi_t]:.3f})",
                          best - at[lo_r, hi_t], cfg.flat, 0, "at_most"))
    return out + [finding(f"rank {r['rank']}, {r['tokens']:,} tokens: |h| mass the predicted set captures (the "
                          f"oracle's {r['oracle_mass']:.3f}; recall {r['recall']:.3f})", r["mass"]) for r in rows]


@register("dejavu-curve", "Deja Vu's predictors on a model (default SmolLM2): recall of the oracle set and |h| mass "
          "vs rank and training tokens -- unpredictable, or undertrained?", DejaVuCurveConfig,
          quick={"tokens": 256, "window": 128, "ranks": (16,), "checkpoints": (512, 1024), "batch": 64,
                 "judge": False})
def run_dejavu_curve(cfg: DejaVuCurveConfig, ctx) -> Result:
    model, ids, train_ids = load_texts(cfg.model, cfg.text, cfg.tokens, cfg.train_texts, cfg.checkpoints[-1],
                                       ctx.device)
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
    return Result(_claims(cfg, rows), {"curve": rows, "cost": {r: p.cost() for r, p in final.items()}}, figures,
                  summary)
