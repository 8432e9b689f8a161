"""Theorem 5 measured: co-occurrence against 1 − H/L, and FFN units' alignment with the latents.

* Data side: the empirical P[l | m] of a latent tree against the theorem's 1 − H(l, m)/L
  (:func:`cooccurrence_fit`), with a batch-means standard error of the slope and binomial
  z-scores against the preset's own law.
* Learning side: the authors' alignment score (for each latent, its best correlation with any
  FFN unit, units max-pooled over the sequence; a level's score is the mean over its latents),
  measured on a held-out batch while a transformer trains (:func:`train_and_score`), with a
  bracket on the Bayes-optimal accuracy to judge the accuracy against.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.core.metrics import attention_entropy
from attnlab.theory.joma.hierarchy import HierarchyData, LatentTree
from attnlab.theory.joma.transformer import PostLNTransformer, train_classifier


# --------------------------------------------------------------------------- co-occurrence
def cooccurrence(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Empirical P[l | m] = count(l and m) / count(m) from presence (N, V) bool.

    Returns P: (V, V) float64 (row l, column m; NaN where count(m) = 0) and count_m: (V,).
    """
    x = tokens.double()
    both = x.T @ x  # (V, V): count(l and m)
    count = x.sum(0)  # (V,)
    return both / count[None, :].where(count > 0, torch.tensor(float("nan"), dtype=torch.float64)), count


def fit_line(measured: torch.Tensor, predicted: torch.Tensor) -> dict[str, float]:
    """Pearson r and least-squares line measured ≈ slope·predicted + intercept (1-D float tensors)."""
    x, y = predicted.double(), measured.double()
    xc, yc = x - x.mean(), y - y.mean()
    slope = float((xc * yc).sum() / (xc * xc).sum())
    r = float((xc * yc).sum() / ((xc * xc).sum() * (yc * yc).sum()).sqrt())
    return {"pearson": r, "slope": slope, "intercept": float(y.mean() - slope * x.mean())}


def cooccurrence_fit(tree: LatentTree, tokens: torch.Tensor, chunks: int, min_count: int) -> dict:
    """Measured P[l|m] vs 1 − H/L over ordered within-class pairs l ≠ m (cross-class pairs are
    0 = 0 exactly and would only inflate the correlation); pairs with count(m) < min_count are left out.

    Returns the fit (pearson, slope, intercept), ``slope_se`` (batch means over ``chunks``),
    ``max_abs_z`` against the preset's own law Π κ_h, and ``_scatter`` (predicted, measured, H) for plots.
    """
    H = tree.lca_height()  # (V, V)
    linear = 1.0 - H.double() / tree.L  # the theorem's 1 − H/L
    exact = tree.cooccurrence_table()  # this preset's Π κ_h
    P, count = cooccurrence(tokens)
    pair = (H > 0) & (H < tree.L) & (count[None, :] >= min_count)  # (V, V)
    fit = fit_line(P[pair], linear[pair])
    # z of each pair against this preset's own law; binomial SE with count(m) trials
    se = (exact * (1 - exact) / count[None, :]).sqrt()
    z = ((P - exact) / se)[pair]
    slopes = [fit_line(cooccurrence(c)[0][pair], linear[pair])["slope"] for c in tokens.chunk(chunks)]
    return {**fit, "slope_se": float(np.std(slopes, ddof=1) / math.sqrt(len(slopes))),
            "max_abs_z": float(z.abs().max()), "pairs": int(pair.sum()), "min_count_m": float(count.min()),
            "_scatter": (linear[pair].numpy(), P[pair].numpy(), H[pair].numpy())}


# --------------------------------------------------------------------------- alignment score
def pool_hidden(h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """Max over non-pad positions: h (N, T, F), pad (N, T) bool -> (N, F).

    A sequence with no tokens (possible in the probabilistic tree) pools to 0, the ReLU floor.
    """
    return h.masked_fill(pad[..., None], float("-inf")).amax(1).clamp_min(0.0)


def latent_correlations(hidden: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of every latent with every unit: hidden (N, F), latents (N, J) -> (J, F).

    One matrix product of the standardised columns. A constant column (dead unit, or a latent
    never/always on in this batch) has no correlation: its entries are NaN.
    """
    h = hidden.double()
    z = latents.double()
    hc, zc = h - h.mean(0), z - z.mean(0)
    hn, zn = hc.norm(dim=0), zc.norm(dim=0)  # (F,), (J,)
    corr = (zc.T @ hc) / (zn[:, None] * hn[None, :])
    ok = (zn[:, None] > 1e-12) & (hn[None, :] > 1e-12)
    return corr.where(ok, torch.tensor(float("nan"), dtype=torch.float64))


def alignment_score(hidden: torch.Tensor, latents: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The authors' score: for each latent its best (signed, largest) correlation over units;
    the level's score is the mean over latents that vary in the batch.

    hidden (N, F), latents (N, J) -> (score, best (J,) float64 with NaN for constant latents).
    """
    corr = latent_correlations(hidden, latents)  # (J, F)
    best = corr.nan_to_num(nan=-math.inf).amax(1)  # (J,)
    best = best.where(torch.isfinite(best), torch.tensor(float("nan"), dtype=torch.float64))
    return float(best.nanmean()), best


def bayes_accuracy(present: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[float, float]:
    """Bracket on the Bayes-optimal accuracy from the token *set* (all a sequence carries besides order).

    upper: plug-in Σ_sets max_y count(set, y) / N (biased up when sets are seen rarely);
    lower: cross-fitted — the majority label of each set learned on one half, scored on the
    other (sets unseen in the first half count as errors), averaged over both directions.
    """
    _, inv = torch.unique(present, dim=0, return_inverse=True)
    n_sets = int(inv.max()) + 1

    def table(idx):  # (sets, classes) label counts over samples idx
        return torch.zeros(n_sets, num_classes).index_put_((inv[idx], y[idx]), torch.ones(len(idx)), accumulate=True)

    upper = float(table(torch.arange(len(y))).amax(1).sum() / len(y))
    halves = torch.arange(len(y)).chunk(2)
    lower = 0.0
    for fit, score in (halves, halves[::-1]):
        t = table(fit)
        guess = t.argmax(1)[inv[score]]
        seen = t.sum(1)[inv[score]] > 0
        lower += float(((guess == y[score]) & seen).float().mean()) / 2
    return lower, upper


def evaluate(model: PostLNTransformer, ev, controls: dict) -> dict:
    """Held-out loss, accuracy, attention entropy per layer, and the alignment score per (layer, level)
    against the true latents ``ev[3]`` and against each control's latents (name -> per-level (N, J))."""
    x, pad, y, latents, _ = ev
    with torch.no_grad():
        out = model(x, pad)
    pooled = [pool_hidden(h, pad) for h in out.ffn_hidden]  # per layer (N, F)
    real = ~pad  # entropy over real query rows; each row's mass sits on real keys only
    entropy = [float(attention_entropy(a).mean(1)[real].mean()) for a in out.attention]

    def scores(lats):  # (layers, levels)
        return [[alignment_score(p, z)[0] for z in lats] for p in pooled]

    return {"loss": float(F.cross_entropy(out.logits, y)), "acc": float((out.logits.argmax(1) == y).float().mean()),
            "score": scores(latents), **{k: scores(v) for k, v in controls.items()}, "attention_entropy": entropy}


def train_and_score(model: PostLNTransformer, data: HierarchyData, ev, controls: dict, marks, steps: int,
                    batch_size: int, lr: float, weight_decay: float, gen: torch.Generator, device: str = "cpu",
                    on_step: Callable[[int], None] | None = None) -> tuple[dict, list[float], list[float]]:
    """Train ``model`` on fresh batches of ``data`` (Adam) and :func:`evaluate` it on the CPU at the
    steps ``marks``. -> ({step: evaluation}, per-step train loss, per-step train accuracy)."""
    evals = {}

    def score(step: int) -> None:
        model.eval()
        evals[step] = evaluate(model.cpu(), ev, controls)
        model.to(device).train()

    def draw():
        x, pad, y, _, _ = data.draw(batch_size, gen)
        return x, pad, y

    loss, acc = train_classifier(model, draw, steps, lr, weight_decay, device, score, marks, on_step)
    return evals, loss, acc
