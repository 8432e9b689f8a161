"""``recall-under-eviction``: what each KV-cache policy forgets, on a model that provably remembers.

SmolLM2 cannot answer StreamEval even with its full text, so there every policy scores ~0 and says nothing.
Here the model is built for the premise: a small Llama trained on MQAR (:mod:`attnlab.recall.mqar`: key-value
pairs, filler, then queries of the keys) until its full cache recalls every pair. Sequences at several gaps are
then streamed token by token through the full cache and caches of one budget (window, sinks+window, H2O,
sinks+H2O, knorm), original positions (the stream fits the trained length: eviction is the only change).
Recall is read by the distance from a query back to its pair, by whether the pair's value slot was still held,
and, for H2O, by the attention the value had drawn before the queries (its heavy-hitter score).

Claims, fixed in the config before the first run, each decided by its 95% interval
(:mod:`attnlab.recall.mqar_claims`: holds, fails, or unresolved where the interval straddles the threshold):

1. the full cache recalls >= ``full_min`` of the queries (the premise; exact binomial interval);
2. where sinks+window still holds the queried value, evicting the rest costs no recall: the full cache's recall
   minus sinks+window's on those queries <= ``held_gap`` (paired bootstrap over sequences);
3. sinks+window recalls the pairs it evicted no better than chance, 1 / the values (StreamingLLM's own
   limitation, its FAQ; exact binomial interval);
4. H2O's heavy-hitter premise, at equal budget: on the queries whose value the window evicted, h2o recalls at
   least ``h2o_margin`` more than window (paired bootstrap);
5. the seed's StreamH2O statement: there, sinks+h2o recalls at least ``h2o_margin`` more than sinks+window.

Claims 2 and 3 were "recalls >= 0.95 of the pairs it holds" and "<= 0.1 of those it evicted" until issue 52:
restatements of the premise (a model that remembers reads what its cache holds), and checked without an
interval. Each sequence at each gap draws its own pairs, so the queries of different sequences are independent.
The quick mode checks the same claims on its smaller model and fewer queries: the intervals say what its
scale decides.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import finding
from attnlab.experiments.registry import Result, register
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.recall.mqar import sample
from attnlab.recall.mqar_claims import claims as mqar_claims
from attnlab.recall.mqar_claims import pack
from attnlab.recall.mqar_stream import stream, value_mass, value_positions
from attnlab.recall.mqar_train import first_at, recall, task_at, train_mqar
from attnlab.recall.plots import mqar_distance_figure, mqar_kept_figure

TALK_ORDER = 1  # after streameval, beside xsum
FULL = "full"


@dataclass(frozen=True)
class MQARConfig:
    # the task: keys and values from two vocabularies of n_keys, filler from n_filler
    n_keys: int = 32
    n_filler: int = 16
    pairs: int = 8
    min_pairs: int = 2  # training draws 2..pairs pairs a step (the easy start that lets recall form)
    queries: int = 8
    max_gap: int = 128  # training gaps 0..max_gap: the model knows every distance it is streamed at
    start_gap: int = 16  # the training gaps' cap starts here...
    ramp: float = 0.4  # ...and reaches max_gap after this share of the steps
    # the model and its training
    d_model: int = 64
    layers: int = 2  # recall needs two: a previous-token head, then the induction head
    heads: int = 1
    d_ffn: int = 256
    batch: int = 64
    steps: int = 3000
    lr: float = 3e-3
    weight_decay: float = 0.1
    track_every: int = 100
    probe_batch: int = 256
    # the streams
    eval_gaps: tuple[int, ...] = (0, 16, 32, 64, 96, 128)
    eval_batch: int = 128
    budget: int = 32  # slots per layer and KV head, every policy alike
    n_sink: int = 4
    policies: tuple[str, ...] = ("window", "sinks", "h2o", "sinks+h2o", "knorm")
    bin: int = 16  # distance bins of the figure and table
    seed: int = 0
    # the claims, fixed before the first run
    full_min: float = 0.99
    held_gap: float = 0.05  # where sinks+window holds the value: the full cache's recall minus its, at most
    h2o_margin: float = 0.1

    def __post_init__(self):
        task_at(self, self.max_gap, repeat=False)  # the task's own checks (streamed queries are distinct)
        if not 0 <= self.ramp <= 1 or self.start_gap < 0:
            raise ConfigError(f"ramp={self.ramp}, start_gap={self.start_gap}: give 0 <= ramp <= 1, start_gap >= 0")
        if not 1 <= self.min_pairs <= self.pairs:
            raise ConfigError(f"min_pairs={self.min_pairs}: give 1 <= min_pairs <= pairs={self.pairs}")
        if unknown := [p for p in self.policies if p not in POLICIES or p == FULL]:
            raise ConfigError(f"policies {unknown}: use some of {', '.join(n for n in POLICIES if n != FULL)} "
                              "(the full cache always runs)")
        if self.budget <= self.n_sink or self.n_sink < 0:
            raise ConfigError(f"budget={self.budget}: give a budget above n_sink={self.n_sink} (the sinks' slots)")
        if not self.eval_gaps or min(self.eval_gaps) < 0 or max(self.eval_gaps) > self.max_gap:
            raise ConfigError(f"eval_gaps={self.eval_gaps}: the model is trained for gaps 0..max_gap={self.max_gap}; "
                              "stream it at those (or raise max_gap)")
        if min(self.steps, self.batch, self.eval_batch, self.track_every, self.probe_batch, self.bin) < 1:
            raise ConfigError("steps, batch, eval_batch, track_every, probe_batch and bin must be >= 1")


def _streams(cfg: MQARConfig, model, ctx) -> dict:
    """Per gap, one batch through every cache; the queries of all gaps joined (gap, sequence, query order), per
    cache: "hit", "held" (the value in every layer's every head), "evicted" (in none), "kept_last" (the last
    layer's share of heads holding it); and each query's "seq" (its sequence), "distance" and "mass"."""
    names = (FULL, *cfg.policies)
    rows = {n: {"hit": [], "kept": [], "first": None} for n in names}
    dist, mass = [], []
    seeded = torch.Generator().manual_seed(cfg.seed + 3)  # each gap draws its own pairs: independent sequences
    with ctx.progress(len(cfg.eval_gaps) * len(names), "streams (gaps x caches)") as bar:
        for gap in cfg.eval_gaps:
            x, scored, distance = sample(task_at(cfg, gap, repeat=False), cfg.eval_batch, seeded)
            values = value_positions(scored, distance)  # (B, Q)
            dist.append(distance[scored].view(cfg.eval_batch, -1))  # (B, Q)
            pair = (values - 2) // 2  # (B, Q) which pair each query asks for
            mass.append(value_mass(model, x, scored, cfg.pairs)[-1].gather(1, pair))  # (B, Q): the last layer's
            for n in names:
                s = stream(model, x, scored, distance, make_policy(n, None if n == FULL else cfg.budget,
                                                                    n_sink=cfg.n_sink))
                rows[n]["hit"].append(s.hit)
                rows[n]["kept"].append(s.kept)
                if gap == max(cfg.eval_gaps):
                    rows[n]["first"] = s.first.mean((0, 1)).tolist()  # (L,) over layers and rows
                bar.update(1)
    out = {}
    for n, r in rows.items():
        kept = torch.cat(r["kept"], 1)  # (layers, G*B, Q)
        out[n] = {"hit": torch.cat(r["hit"]).flatten().numpy(),
                  "held": (kept.amin(0) == 1).flatten().numpy(),  # every layer held the value
                  "evicted": (kept.amax(0) == 0).flatten().numpy(),  # no layer's head held it
                  "kept_last": kept[-1].flatten().numpy(),  # the induction layer's heads
                  "first": r["first"]}
    n_seq = len(cfg.eval_gaps) * cfg.eval_batch
    return {"caches": out, "seq": np.repeat(np.arange(n_seq), cfg.queries),
            "distance": torch.cat(dist).flatten().numpy(), "mass": torch.cat(mass).flatten().numpy()}


def _mean(a: np.ndarray) -> float:
    return float(a.mean()) if a.size else float("nan")


def _queries(cfg: MQARConfig, s: dict) -> dict:
    """Every query's outcome under every cache, as bits (mqar_claims.unpack reads them): the claims' intervals
    can be recomputed from metrics.json."""
    c = s["caches"]
    return {"order": "gap, then sequence, then query", "gaps": list(cfg.eval_gaps), "sequences": cfg.eval_batch,
            "queries": cfg.queries, "n": int(s["seq"].size),
            **{key: {n: pack(r[key]) for n, r in c.items()} for key in ("hit", "held", "evicted")}}


def _by_mass(s: dict) -> dict:
    """For the H2O family, on the queries the window evicted: recall and the induction layer's kept share by
    tercile of the value's attention mass before the queries (its heavy-hitter score under the full cache)."""
    c = s["caches"]
    if "window" not in c:
        return {}
    old = c["window"]["evicted"]
    if old.sum() < 3:
        return {}
    edges = np.quantile(s["mass"][old], [1 / 3, 2 / 3])
    tercile = np.digitize(s["mass"], edges)
    return {n: {t: {"recall": _mean(c[n]["hit"][old & (tercile == i)]),
                    "kept": _mean(c[n]["kept_last"][old & (tercile == i)]),
                    "mass": _mean(s["mass"][old & (tercile == i)])}
                for i, t in enumerate(("low", "mid", "high"))}
            for n in ("h2o", "sinks+h2o") if n in c}


def _by_distance(cfg: MQARConfig, s: dict) -> dict:
    """{cache: {bin start: recall}} over distance bins of width ``cfg.bin``."""
    start = (s["distance"] // cfg.bin) * cfg.bin
    return {n: {int(b): _mean(r["hit"][start == b]) for b in np.unique(start)} for n, r in s["caches"].items()}


def _findings(cfg: MQARConfig, s: dict, by_mass: dict) -> list:
    c = s["caches"]
    out = [finding(f"{n}: recall over all {r['hit'].size} queries", _mean(r["hit"])) for n, r in c.items() if n != FULL]
    for n, terciles in by_mass.items():
        for t, v in terciles.items():
            out.append(finding(f"{n}, queries the window evicted, {t} third of the value's attention mass before the "
                               f"queries (mean {v['mass']:.3f}): share of the last layer's heads holding the value",
                               v["kept"]))
    return out


@register("recall-under-eviction", "What each KV policy forgets on a model that remembers: a 2-layer Llama trained "
          "on MQAR to full recall, streamed through full / window / sinks / h2o / sinks+h2o / knorm at one budget; "
          "recall by distance, by whether the value was held, and by its heavy-hitter mass.", MQARConfig,
          quick={"n_keys": 16, "pairs": 4, "queries": 4, "max_gap": 32, "d_model": 64, "d_ffn": 128, "steps": 450,
                 "batch": 128, "track_every": 50, "probe_batch": 128, "eval_gaps": (0, 16, 32), "eval_batch": 32,
                 "budget": 16, "bin": 8})
def run_recall_under_eviction(cfg: MQARConfig, ctx) -> Result:
    with ctx.progress(cfg.steps, "MQAR training") as bar:
        run = train_mqar(cfg, bar)
    s = _streams(cfg, run.model, ctx)
    claims = mqar_claims(cfg, s["caches"], s["seq"], task_at(cfg, 0).n_values)
    by_mass = _by_mass(s)
    claims += _findings(cfg, s, by_mass)
    reached = first_at(run.track, cfg.full_min)
    seeded = torch.Generator().manual_seed(cfg.seed + 4)  # held out: not the training probe
    x, scored, _ = sample(task_at(cfg, max(cfg.eval_gaps)), cfg.probe_batch, seeded)
    held_out = recall(run.model, x, scored)
    by_distance = _by_distance(cfg, s)
    recent = {n: make_policy(n, cfg.budget, n_sink=cfg.n_sink).n_recent(cfg.budget) for n in cfg.policies}
    ctx.savefig(mqar_distance_figure(by_distance, cfg.budget, cfg.bin), "recall_distance.png")
    ctx.savefig(mqar_kept_figure({n: r["first"] for n, r in s["caches"].items()}, cfg.pairs, max(cfg.eval_gaps)),
                "recall_kept.png")
    metrics = {"config": asdict(cfg), "train": {"track": run.track, "seconds": run.seconds,
                                                "reached": reached, "held_out_recall": held_out},
               "recall": {n: _mean(r["hit"]) for n, r in s["caches"].items()}, "by_distance": by_distance,
               "by_mass": by_mass, "recent": recent,
               "kept_at_first_query": {n: r["first"] for n, r in s["caches"].items()}, "queries": _queries(cfg, s)}
    captions = {"recall_distance.png": f"Recall by the distance from a query back to its pair (bins of {cfg.bin} "
                                       f"tokens), per cache at budget {cfg.budget}; the vertical line is the budget. "
                                       "sinks' zig-zag beyond it is pair 1, whose value sits in a sink slot (BOS, "
                                       "k1, v1, k2): its distances fall in every other bin.",
                "recall_kept.png": f"At the first query of the gap-{max(cfg.eval_gaps)} sequences: the share of "
                                   "(layer, head, sequence) holding each stream position, per cache. The pairs "
                                   "come first, then the filler, then the queries."}
    return Result(claims, metrics, captions, _summary(cfg, run, reached, held_out, s, by_distance, by_mass))


def _summary(cfg, run, reached, held_out, s, by_distance, by_mass) -> str:
    took = (f"probe recall {cfg.full_min:.0%} first at step {reached['step']} ({reached['seconds']:.0f} s)"
            if reached else f"probe recall never reached {cfg.full_min:.0%}")
    lines = [f"MQAR: {cfg.n_keys} keys, {cfg.n_keys} values, {cfg.n_filler} filler tokens; {cfg.pairs} pairs, "
             f"{cfg.queries} queries, gaps 0..{cfg.max_gap}. Model: {cfg.layers} layers x {cfg.heads} head(s), "
             f"d_model {cfg.d_model}, d_ffn {cfg.d_ffn}; {cfg.steps} steps of {cfg.batch} in {run.seconds:.0f} s "
             f"({took}); held-out recall at gap {max(cfg.eval_gaps)}: {held_out:.3f}.", "",
             f"Recall by distance (tokens from the query back to its pair's key), budget {cfg.budget}:", ""]
    bins = sorted({b for d in by_distance.values() for b in d})
    lines += ["| cache | " + " | ".join(f"{b}-{b + cfg.bin - 1}" for b in bins) + " | all |",
              "|---|" + "---|" * (len(bins) + 1)]
    for n, d in by_distance.items():
        lines.append(f"| {n} | " + " | ".join(f"{d.get(b, float('nan')):.2f}" for b in bins)
                     + f" | {_mean(s['caches'][n]['hit']):.3f} |")
    if by_mass:
        lines += ["", "Queries the window evicted, by third of the value's attention mass before the queries "
                  "(the last layer's; H2O's score under the full cache): recall / share of the last layer's heads "
                  "still holding the value.", "", "| cache | low | mid | high |", "|---|---|---|---|"]
        for n, t in by_mass.items():
            lines.append(f"| {n} | " + " | ".join(f"{v['recall']:.2f} / {v['kept']:.2f}" for v in t.values()) + " |")
    return "\n".join(lines)
