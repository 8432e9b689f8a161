"""How Deja Vu's predictors learn: recall of the oracle set and |h| mass captured against rank and training tokens.

One set of predictors per rank trains on the training text in growing chunks (each chunk ``epochs`` passes as it
arrives: the first checkpoint's tokens, then the next ones, ...), and is scored on the held-out text after each:
a learning curve in one training run per rank, instead of one run per point. The training ids are cut into
windows taken in a seeded random order first: training texts come one after another (all of the first, then
the second, ...), and chunks in that order would measure a change of text, not more tokens (a first run did:
SmolLM2's recall fell when the chunks reached KJV and War and Peace, the evaluation text being WikiText).
Each chunk's call to :func:`~attnlab.sparsity.predictors.train` starts a fresh AdamW (its moments reset
between chunks), which a single long run would not: a curve point is a lower bound on what the same tokens
give in one run.

:func:`slopes` reads the curve as a line: recall against log2(training tokens) and log2(rank) by least squares,
each slope the recall a doubling adds; :func:`slope_intervals` bootstraps it over the layers, whose recalls every
row keeps (the curve's recall is their mean).
"""
from __future__ import annotations

import math
import statistics

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.intervals import paired_bootstrap
from attnlab.sparsity.predictors import new_predictors, score, train


def check_checkpoints(checkpoints: tuple[int, ...], available: int) -> None:
    if not checkpoints or list(checkpoints) != sorted(set(checkpoints)) or checkpoints[0] < 2:
        raise ConfigError(f"checkpoints={checkpoints}: give increasing token counts >= 2, e.g. 12288,49152")
    if checkpoints[-1] > available:
        raise ConfigError(f"checkpoint {checkpoints[-1]} tokens: the training texts give {available}; lower it")


def mixed(ids: torch.Tensor, window: int, seed: int = 0) -> torch.Tensor:
    """ids (T,) as whole windows of ``window`` tokens in a seeded random order (the tail short of a window last):
    any prefix mixes every text the ids join."""
    n = ids.numel() // window
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return torch.cat([ids[:n * window].view(n, window)[order].flatten(), ids[n * window:]])


def learning_curve(model, name: str, train_ids: torch.Tensor, eval_ids: torch.Tensor, ranks: tuple[int, ...],
                   checkpoints: tuple[int, ...], keep: float, source: str = "own", epochs: int = 1,
                   window: int = 512, batch: int = 128, lr: float = 3e-3, progress=None) -> tuple[list[dict], dict]:
    """Rows {"rank", "tokens", "token_passes", "recall", "mass", "oracle_mass", "recall_per_layer", "bce"} (means
    over the predicted layers), one per rank and checkpoint; and {rank: the predictors after the last one}."""
    check_checkpoints(checkpoints, train_ids.numel())
    train_ids = mixed(train_ids, window)
    rows, final = [], {}
    for r in ranks:
        preds = new_predictors(model, name, r, keep, source)
        done = 0
        for n in checkpoints:
            bce = train([preds], model, train_ids[done:n], epochs, window, batch, lr, progress)[0]
            done = n
            s = score([preds], model, eval_ids, window)[source]
            rows.append({"rank": r, "tokens": n, "token_passes": n * epochs, "recall": statistics.mean(s["recall"]),
                         "mass": statistics.mean(s["mass"]), "oracle_mass": statistics.mean(s["oracle_mass"]),
                         "recall_per_layer": s["recall"], "bce": bce})
        final[r] = preds
    return rows, final


def _design(rows: list[dict]) -> tuple[np.ndarray, list[str]]:
    """(points, 1 + terms) least-squares design: a constant, then log2(tokens) and log2(rank) where they vary."""
    cols, terms = [np.ones(len(rows))], []
    for term in ("tokens", "rank"):
        x = np.log2([r[term] for r in rows])
        if np.ptp(x) > 0:  # one checkpoint (or one rank): that slope is not measured
            cols.append(x)
            terms.append(term)
    return np.stack(cols, 1), terms


def slopes(rows: list[dict], recall: np.ndarray | None = None) -> dict[str, float]:
    """{"tokens": recall a doubling of training tokens adds, "rank": a doubling of rank adds}: the least-squares
    fit recall = a + b log2(tokens) + c log2(rank) over the rows (one per rank and checkpoint). ``recall``
    (points,) replaces the rows' own (a resample's)."""
    x, terms = _design(rows)
    y = np.array([r["recall"] for r in rows]) if recall is None else recall
    coef = np.linalg.lstsq(x, y, rcond=None)[0]  # (1 + terms,)
    return {t: float(c) for t, c in zip(terms, coef[1:])}


def slope_intervals(rows: list[dict], seed: int = 0) -> dict[str, tuple[float, float]]:
    """{term: the 95% percentile interval of its slope}, resampling the layers (every row's recall_per_layer):
    a layer's recalls at every point move together (paired), and each resample's curve is their mean."""
    per_layer = np.array([r["recall_per_layer"] for r in rows]).T  # (layers, points)
    return {t: paired_bootstrap(lambda s, t=t: slopes(rows, s[0].mean(0))[t], [per_layer], seed=seed)
            for t in slopes(rows)}


def mean_interval(per_layer: list[float], seed: int = 0) -> tuple[float, float]:
    """The 95% percentile interval of the mean of per-layer recalls, resampling the layers."""
    return paired_bootstrap(lambda s: float(s[0].mean()), [np.array(per_layer)[:, None]], seed=seed)


def doublings_to(target: float, at: float, slope: float) -> float:
    """How many doublings the fitted line needs to lift recall from ``at`` to ``target`` (inf: it never does)."""
    return (target - at) / slope if slope > 0 else math.inf
