"""``recall-under-eviction``'s claims, each decided by its 95% interval (holds, fails, or unresolved).

Two kinds of interval, from the per-query outcomes (:func:`attnlab.recall.exp_mqar._streams`):

- a rate (the full cache's recall; recall of the pairs a cache evicted) is a binomial count over the queries:
  Clopper-Pearson's exact interval;
- a contrast between two caches of one budget is a difference of recalls *on the same queries*: a paired
  bootstrap over the sequences (a sequence's queries, each cache's outcome on each, drawn together), so the
  sequences' difficulty cancels and the queries of one sequence are not counted as independent.

A query's outcomes are stored in ``metrics.json`` as bits (:func:`pack`, :func:`unpack`), so every interval can
be recomputed from the file.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import binomtest

from attnlab.experiments.claims import check
from attnlab.experiments.intervals import paired_bootstrap

EXACT = "Clopper-Pearson exact, 95%, over the queries"
PAIRED = "paired bootstrap over the sequences (their queries together), 95%"


def rate_interval(hits: np.ndarray) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of the share of true entries in ``hits`` (N,) bool."""
    ci = binomtest(int(hits.sum()), int(hits.size)).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def contrast(a: np.ndarray, b: np.ndarray, seq: np.ndarray, on: np.ndarray, seed: int = 0):
    """Recall of ``a`` minus recall of ``b`` (N,) bool over the queries where ``on`` (N,) bool; ``seq`` (N,)
    each query's sequence. -> (difference, its paired-bootstrap 95% interval, sequences resampled)."""
    s, width = seq[on], int(seq.max()) + 1
    rows = np.stack([np.bincount(s, a[on], width), np.bincount(s, b[on], width), np.bincount(s, None, width)], 1)
    rows = rows[rows[:, 2] > 0]  # (sequences with a query here, 3): hits of a, hits of b, queries

    def diff(strata):
        r = strata[0]
        return float((r[:, 0].sum() - r[:, 1].sum()) / r[:, 2].sum())

    return diff([rows]), paired_bootstrap(diff, [rows], seed=seed), len(rows)


def premise(cfg, hit: np.ndarray):
    """The full cache recalls the pairs: >= ``cfg.full_min``, by the exact interval over the queries."""
    return check(f"the full cache recalls the pairs (the premise): recall over {hit.size} queries at gaps "
                 f"{cfg.eval_gaps}", hit.mean(), cfg.full_min, 0, "at_least", interval=rate_interval(hit), n=hit.size,
                 method=EXACT)


def held_costs_nothing(cfg, full: np.ndarray, sinks: np.ndarray, held: np.ndarray, seq: np.ndarray):
    """Where sinks+window still holds the value in every layer, evicting the rest costs (almost) no recall: the
    full cache's recall minus sinks+window's on those queries <= ``cfg.held_gap``."""
    d, ci, n = contrast(full, sinks, seq, held, cfg.seed)
    c = check(f"where sinks {cfg.n_sink}+{cfg.budget - cfg.n_sink} still holds the value (in every layer; {held.sum()} "
              f"queries), evicting the rest costs no recall: the full cache's recall minus sinks' on the same queries "
              f"({full[held].mean():.3f} - {sinks[held].mean():.3f})", d, 0, cfg.held_gap, "at_most", interval=ci,
              n=n, method=PAIRED)
    if (full[held] == sinks[held]).all():  # the bootstrap of identical outcomes is 0..0, not certainty
        c = c.because(f"the two caches answer alike on every one of the {held.sum()} queries: the bootstrap's 0..0 "
                      "says no disagreement was seen, not that none is possible")
    return c


def evicted_at_chance(cfg, sinks: np.ndarray, evicted: np.ndarray, n_values: int):
    """sinks+window recalls the pairs it evicted no better than a value drawn without the pair (1 / n_values):
    nothing else in the cache carries an evicted value (StreamingLLM's own limitation, its FAQ)."""
    hit = sinks[evicted]
    return check(f"sinks {cfg.n_sink}+{cfg.budget - cfg.n_sink} recalls the pairs it evicted (value gone from every "
                 f"layer; {hit.size} queries) no better than chance (1/{n_values}: a value drawn without the pair)",
                 hit.mean() if hit.size else float("nan"), 1 / n_values, 0, "at_most",
                 interval=rate_interval(hit), n=hit.size, method=EXACT).unresolved_because(
        "recall of the evicted pairs is at chance level: the interval holds chance, so the data cannot say "
        "whether it is below or above").failing_because(
        "some evicted pairs are recalled above chance: something besides the value's slot carries it")


def heavy_over_base(cfg, heavy: str, base: str, c: dict, seq: np.ndarray):
    """On the queries whose value ``base`` evicted, ``heavy`` recalls >= ``cfg.h2o_margin`` more (same budget, same
    queries)."""
    old = c[base]["evicted"]
    d, ci, n = contrast(c[heavy]["hit"], c[base]["hit"], seq, old, cfg.seed)
    return check(f"{heavy} over {base} at budget {cfg.budget}, on the {old.sum()} queries whose value {base} evicted: "
                 f"recall {c[heavy]['hit'][old].mean():.3f} minus {c[base]['hit'][old].mean():.3f}", d,
                 cfg.h2o_margin, 0, "at_least", interval=ci, n=n, method=PAIRED)


def claims(cfg, c: dict, seq: np.ndarray, n_values: int) -> list:
    """c: {cache: {"hit", "held", "evicted"} (N,) bool}; seq (N,) each query's sequence."""
    out = [premise(cfg, c["full"]["hit"])]
    if "sinks" in c:
        sinks = c["sinks"]
        if sinks["held"].any():
            out.append(held_costs_nothing(cfg, c["full"]["hit"], sinks["hit"], sinks["held"], seq))
        if sinks["evicted"].any():
            out.append(evicted_at_chance(cfg, sinks["hit"], sinks["evicted"], n_values))
    for heavy, base in (("h2o", "window"), ("sinks+h2o", "sinks")):
        if heavy in c and base in c and c[base]["evicted"].any():
            out.append(heavy_over_base(cfg, heavy, base, c, seq))
    return out


def pack(bits: np.ndarray) -> str:
    """(N,) bool -> hex, 8 queries a byte (``unpack`` reads it back)."""
    return np.packbits(bits.astype(bool)).tobytes().hex()


def unpack(text: str, n: int) -> np.ndarray:
    """The (n,) bool array :func:`pack` wrote."""
    return np.unpackbits(np.frombuffer(bytes.fromhex(text), dtype=np.uint8))[:n].astype(bool)
