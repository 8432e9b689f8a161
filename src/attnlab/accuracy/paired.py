"""Two rows of an accuracy table compared on the same items: the paired interval of their average's
difference, and how many items would settle a claim on it (torch-free).

A row's average is the mean over tasks of its per-task accuracy; the difference of two rows' averages is
bootstrapped by resampling items within each task, the same items for both rows
(:func:`attnlab.experiments.intervals.paired_bootstrap`), from each task's per-item correctness
(``correct``: one digit an item, as :func:`attnlab.accuracy.run.correct_items` keeps it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnlab.experiments.claims import ACCEPTED, Claim, check
from attnlab.experiments.intervals import RESAMPLES, mean_difference, paired_bootstrap

METHOD = f"paired bootstrap over items within each task, {RESAMPLES:,} resamples, 95%"
Z = 1.959964  # the normal quantile of a two-sided 95% interval


@dataclass(frozen=True)
class Paired:
    """Row ``a`` against row ``b`` over some tasks' items."""

    a: str
    b: str
    interval: tuple[float, float]  # of avg(a) - avg(b)
    n: int  # items, over all the tasks
    discordance: float  # the share of those items one row gets right and the other wrong


def _items(result: dict, task: str) -> np.ndarray:
    return np.array([int(x) for x in result["tasks"][task]["correct"]])  # (items,) 0/1


def paired(table: dict[str, dict], a: str, b: str, tasks: list[str], seed: int = 0) -> Paired:
    """avg(a) - avg(b) over ``tasks``: its paired bootstrap interval, its items and the rows' discordance."""
    strata = []
    for t in tasks:
        x, y = _items(table[a], t), _items(table[b], t)
        if len(x) != len(y):
            raise ValueError(f"{a} and {b} answered different items of {t} ({len(x)} vs {len(y)}): not paired")
        strata.append(np.stack([x, y], 1))  # (items, 2)
    both = np.concatenate(strata)  # (n, 2)
    return Paired(a, b, paired_bootstrap(mean_difference, strata, seed=seed), len(both),
                  float((both[:, 0] != both[:, 1]).mean()))


def items_to_resolve(discordance: float, gap: float) -> float:
    """About how many items would put a 95% interval clear of a bound ``gap`` away, at this discordance.

    Why: per item the paired difference is +1, -1 or 0; its variance is discordance - mean^2 <= discordance,
    so the average's standard error is at most sqrt(discordance / n) (McNemar's setting; the mean over tasks
    of equal-sized tasks is the mean over items). The interval clears the bound once Z * sqrt(d / n) < gap:
    n > Z^2 d / gap^2. A measurement on the bound (gap 0) is never settled: inf.
    """
    if gap <= 0:
        return math.inf
    return float(math.ceil(Z * Z * discordance / (gap * gap)))


def paired_check(text: str, measured: float, expected: float, tolerance: float, test: str,
                 p: Paired | None) -> Claim:
    """``check`` with the pair's interval, and a note saying how many items would settle it (no pair: no items
    compared, a plain check of the NaN measured, which fails)."""
    if p is None:
        return check(text, measured, expected, tolerance, test)
    c = check(text, measured, expected, tolerance, test, interval=p.interval, n=p.n, method=METHOD)
    ends = [e for e in ACCEPTED[test](expected, tolerance) if math.isfinite(e)]
    gap = min(abs(measured - e) for e in ends)
    need = items_to_resolve(p.discordance, gap)
    if p.discordance == 0:
        return c.because(f"{p.a} and {p.b} agree on every one of the {p.n} items: the bootstrap's interval is the "
                         f"point 0, though with none seen up to 3/{p.n} = {3 / p.n:.1%} of such items could disagree "
                         "(the rule of three)")
    settle = ("no number of items would settle it (the measurement sits on the bound)" if math.isinf(need) else
              f"about {need:,.0f} items would settle it (n > 1.96^2 x discordance / gap^2, gap "
              f"|measured - {min(ends, key=lambda e: abs(measured - e)):g}| = {gap:.3g})")
    return c.because(f"{p.a} and {p.b} disagree on {p.discordance:.1%} of the {p.n} items; at that discordance "
                     + settle)
