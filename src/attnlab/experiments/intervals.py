"""Intervals for claims that compare methods on the same items: the paired bootstrap.

A claim such as "H2O within 1 point of dense on average" measures both methods on the same items, so the
item-to-item difficulty cancels: resampling each item *with all its methods' values together* (paired)
gives an interval as narrow as the methods' disagreement allows, where resampling each method on its own
would add the spread of the items' difficulty twice. Items are resampled within each stratum (an accuracy
table's task), so the claim's own estimator -- the mean over tasks of per-task means -- is what is
bootstrapped. Numpy only: ``check(..., interval=paired_bootstrap(...), n=..., method=...)`` reads it.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95


def paired_bootstrap(estimate: Callable[[list[np.ndarray]], float], strata: Sequence[np.ndarray],
                     resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of ``estimate`` over ``resamples`` seeded resamples of ``strata``.

    Each stratum is an array (items, methods): one row per item, one column per method compared, and a
    resample draws rows with replacement within each stratum -- an item's values move together (paired).
    A resample on which ``estimate`` is undefined (NaN: a ratio's 0/0) is left out; none defined: ValueError.
    """
    strata = [np.asarray(s, dtype=float) for s in strata]
    if not strata or any(len(s) == 0 for s in strata):
        raise ValueError("a paired bootstrap needs at least one item in every stratum")
    rng = np.random.default_rng(seed)
    draws = np.array([estimate([s[rng.integers(0, len(s), len(s))] for s in strata]) for _ in range(resamples)])
    if np.isnan(draws).all():
        raise ValueError("the estimate is undefined on every resample")
    lo, hi = np.nanquantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def mean_difference(strata: list[np.ndarray]) -> float:
    """The mean over strata of each stratum's mean of column 0 minus column 1 (items: rows)."""
    return float(np.mean([(s[:, 0] - s[:, 1]).mean() for s in strata]))
