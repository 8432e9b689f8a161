"""The leaderboard from its answers (torch-free): mean scores per regime, policy, ratio and task, the premise of
each task (the full cache answers it) and the claims, each a paired comparison over the same items with its
bootstrap interval (:func:`attnlab.experiments.intervals.paired_bootstrap`), which decides it.

An answer row is ``{"task", "length", "item", "regime", "policy", "ratio", "score", ...}``; the full cache's
rows have regime and policy ``"full"`` and ratio 0.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from attnlab.experiments.claims import Claim, check, finding, undecided
from attnlab.experiments.intervals import RESAMPLES, mean_difference, paired_bootstrap

NEEDLES = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery")  # the claims' retrieval tasks
METHOD = f"paired bootstrap over items within each task and length, {RESAMPLES:,} resamples, 95%"


def key(row: dict) -> tuple:
    return row["regime"], row["policy"], float(row["ratio"])


def scores(rows: list[dict]) -> dict[tuple, dict[tuple, float]]:
    """(regime, policy, ratio) -> {(task, length, item): score}."""
    out: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for r in rows:
        out[key(r)][(r["task"], r["length"], r["item"])] = float(r["score"])
    return out


def table(rows: list[dict]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """regime -> policy -> ratio -> task -> mean score (and "average" over the tasks)."""
    by: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[key(r)][r["task"]].append(float(r["score"]))
    out: dict = {}
    for (regime, policy, ratio), tasks in sorted(by.items()):
        means = {t: float(np.mean(v)) for t, v in tasks.items()}
        means["average"] = float(np.mean(list(means.values())))
        out.setdefault(regime, {}).setdefault(policy, {})[f"{ratio:g}"] = means
    return out


def costs(rows: list[dict]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """regime -> policy -> ratio -> {"tokens_per_s": mean decode speed, "kv_bytes": mean cache bytes when the
    answer began} over the answers (what each method costs beside what it scores)."""
    by: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by[key(r)].append(r)
    out: dict = {}
    for (regime, policy, ratio), rs in sorted(by.items()):
        out.setdefault(regime, {}).setdefault(policy, {})[f"{ratio:g}"] = {
            "tokens_per_s": float(np.mean([r["tokens_per_s"] for r in rs])),
            "kv_bytes": float(np.mean([r["kv_bytes"] for r in rs]))}
    return out


def premise(by: dict[tuple, dict[tuple, float]], threshold: float, seed: int = 0) -> dict[str, Claim]:
    """Per task: the full cache's mean score is at least ``threshold`` (its interval over the items decides);
    ``by``: :func:`scores`."""
    full = by[("full", "full", 0.0)]
    out = {}
    for task in dict.fromkeys(t for t, _, _ in full):
        x = np.array([s for (t, _, _), s in full.items() if t == task])
        interval = paired_bootstrap(mean_difference, [np.stack([x, np.zeros_like(x)], 1)], seed=seed)
        out[task] = check(f"premise: the full cache answers {task} (mean score >= {threshold:g})", float(x.mean()),
                          threshold, 0.0, "at_least", interval=interval, n=len(x), method=METHOD)
    return out


def compare(by: dict[tuple, dict[tuple, float]], a: tuple, b: tuple, tasks: list[str], seed: int = 0):
    """mean(a) - mean(b) over ``tasks``' items (the same items for both; ``by``: :func:`scores`): (difference,
    interval, n), or None where either side has no answers there."""
    sa, sb = by.get(a, {}), by.get(b, {})
    strata = []
    for task in tasks:
        items = sorted(k for k in sa if k[0] == task and k in sb)
        if items:
            strata.append(np.array([[sa[k], sb[k]] for k in items]))
    if not strata:
        return None
    return mean_difference(strata), paired_bootstrap(mean_difference, strata, seed=seed), sum(map(len, strata))


def _claim(text: str, by, a, b, tasks, expected: float, test: str, seed: int) -> Claim:
    got = compare(by, a, b, tasks, seed)
    if got is None:
        return undecided(check(text, math.nan, expected, 0.0, test),
                         f"not measured here: no answers of both {a} and {b} on {', '.join(tasks) or 'any task'}")
    diff, interval, n = got
    c = check(text, diff, expected, 0.0, test, interval=interval, n=n, method=METHOD)
    both = [v for side in (a, b) for k, v in by.get(side, {}).items() if k[0] in tasks]
    if len(set(both)) == 1:  # every answer of both sides at the floor (or the ceiling): nothing tells them apart
        return undecided(c, f"both score {both[0]:g} on every one of the {n} items: the task's floor or ceiling "
                            "decides, not the methods")
    return c


def claims(rows: list[dict], threshold: float, seed: int = 0) -> list[Claim]:
    """The premise per task, then the papers' claims over the needle tasks whose premise holds (fixed before the
    first run); a claim with no such task is unresolved, saying so; then each row's average as a finding."""
    by = scores(rows)  # read once: every claim compares two of its rows
    gates = premise(by, threshold, seed)
    needles = [t for t in NEEDLES if t in gates and gates[t].status == "holds"]
    why = "no needle task's premise holds: the full cache does not answer them, so no method can lose them"
    stated = [
        ("SnapKV keeps the needles at least as well as H2O at ratio 0.5 in the prefill regime (SnapKV's claim): "
         "snapkv - h2o, mean score", ("prefill", "snapkv", 0.5), ("prefill", "h2o", 0.5), 0.0, "at_least"),
        ("StreamingLLM loses the needles outside its window: at ratio 0.875 in the prefill regime, full - sinks "
         "is at least 0.5", ("full", "full", 0.0), ("prefill", "sinks", 0.875), 0.5, "at_least"),
        ("a query-aware scorer loses when it must choose while decoding: SnapKV at ratio 0.5, prefill - decode "
         ">= 0", ("prefill", "snapkv", 0.5), ("decode", "snapkv", 0.5), 0.0, "at_least"),
    ]
    out = list(gates.values())
    for text, a, b, expected, test in stated:
        c = _claim(text, by, a, b, needles, expected, test, seed)
        out.append(c if needles else undecided(c, why))
    for regime, policies in table(rows).items():
        for policy, ratios in policies.items():
            for ratio, means in ratios.items():
                out.append(finding(f"{regime} {policy} at ratio {ratio}: mean score over the tasks", means["average"]))
    return out
