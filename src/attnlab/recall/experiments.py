"""``streameval``: what eviction forgets. StreamEval (the stream of :mod:`attnlab.recall.streameval`) and the
passkey prompt, fed once, token by token, through the full cache and caches of equal budgets under the chosen
policies (any of :data:`attnlab.kv.policies.POLICIES`; by default ``sinks``, ``h2o`` and ``sinks+h2o``),
rolling positions, every answer generated in place.

Claims, fixed before the first run (thresholds in the config), after a premise added on 2026-11-27 once the
committed run had shown the full cache answering none of its 37 queries:

0. the premise: the full cache answers the stream's queries, at least ``full_answers`` of them, by the exact
   (Clopper-Pearson) interval; where it does not, claims 1-3 are unresolved -- what eviction forgets cannot be
   told apart from what the model never knew;
1. the full cache does not forget while the stream fits the model's context: its accuracy at the longest
   distance is >= ``dense_keeps`` x its accuracy at the shortest;
2. per budget, sinks+window answers as well as the full cache while the value is inside its window:
   accuracy on those queries >= ``inside_vs_dense`` x the full cache's on the same queries;
3. per budget, the seed's StreamH2O claim: on the queries whose value is older than sinks+h2o's recent
   window, sinks+h2o answers more of them than sinks+window (at least one more);
4. the passkey at ``passkey_budget`` (since 2026-11-26; findings before), the seed's two statements about H2O:
   "StreamingLLM is a subset of H2O" (h2o finds at least as many passkeys as sinks+window) and StreamH2O
   (sinks+h2o finds at least as many as sinks+window).

``lines=0`` streams the passkey alone (claim 4; no StreamEval stream).

Measured besides: sinks+window's accuracy once the value is evicted (the seed's table: 0; a finding since
2026-11-25 -- an evicted value cannot be read from the cache, so as a claim it could not fail); for the
policies that keep slots by a per-head score (the H2O family, knorm), the share of (layer, KV head) pairs
that still held the value when the answer began -- among right and among wrong answers (is the answer kept
as a heavy hitter?) -- and the passkey's accuracy and key retention per policy.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import Claim, check, finding, undecided
from attnlab.experiments.registry import Result, register
from attnlab.kv.cache import POSITIONS
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.methods.configured import NOT_KV, configured, methods_option
from attnlab.recall.jobs import passkey_job, run_jobs, stream_job, validate
from attnlab.recall.mqar_claims import EXACT, rate_interval
from attnlab.recall.plots import accuracy_figure, kept_figure
from attnlab.recall.streameval import StreamSpec

FULL = "full"


@dataclass(frozen=True)
class StreamEvalConfig:
    model: str = "smollm2"
    lines: int = 160  # 0: no StreamEval stream (the passkey alone)
    query_every: int = 4  # StreamEval asks every 10 lines; more queries per token streamed here
    distances: tuple[int, ...] = (3, 6, 12, 24, 48)  # lines; ~21 SmolLM2 tokens a line, plus the queries between
    seed: int = 0
    budgets: tuple[int, ...] = (256, 512)
    policies: tuple[str, ...] = ("sinks", "h2o", "sinks+h2o")  # names in POLICIES; the full cache always runs too
    n_sink: int = 4
    answer_tokens: int = 6  # tokens the model writes per answer (a value has at most 5 digits, then ">")
    positions: str = "rolling"
    chat: bool = False  # the stream as a conversation in the model's chat template (needs one)
    passkey_length: int = 768  # 0: no passkey
    passkey_depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    passkey_budget: int = 256
    workers: int = 2  # streams at once, each in its own process
    methods: tuple[str, ...] = methods_option()  # weight, RoPE or sparsity methods every cache runs under
    checked: bool = True  # False (quick): a few queries decide only the premise; the rest are unresolved, with why
    # claim thresholds, fixed before the first run (full_answers: the premise, 2026-11-27)
    full_answers: float = 0.75
    dense_keeps: float = 0.75
    inside_vs_dense: float = 0.75

    METHOD_KINDS: ClassVar = NOT_KV
    METHOD_WHY: ClassVar = ("streameval compares its own KV caches"
                            " (--set policies=, budgets=, n_sink=); give weight, RoPE or sparsity methods, "
                            "which every cache then runs under")

    def __post_init__(self):
        configured(self)  # an unknown method or option, a KV policy: one line, before the model loads
        if self.lines:
            StreamSpec(self.lines, self.query_every, self.distances, self.seed)  # its own checks
        elif not self.passkey_length:
            raise ConfigError("lines=0 and passkey_length=0 leave nothing to stream: give one of them")
        if unknown := [p for p in self.policies if p not in POLICIES or p == FULL]:
            raise ConfigError(f"policies {unknown}: use some of {', '.join(n for n in POLICIES if n != FULL)} "
                              "(the full cache always runs)")
        if not self.budgets or min(self.budgets) <= self.n_sink:
            raise ConfigError(f"budgets={self.budgets}: give token budgets above n_sink={self.n_sink}")
        if self.positions not in POSITIONS:
            raise ConfigError(f"positions={self.positions!r}: use {' or '.join(POSITIONS)}")
        if self.answer_tokens < 1 or self.workers < 1:
            raise ConfigError(f"answer_tokens={self.answer_tokens}, workers={self.workers}: both must be >= 1")

    @property
    def spec(self) -> StreamSpec:
        return StreamSpec(self.lines, self.query_every, self.distances, self.seed)

    def recent_windows(self) -> dict[str, int]:
        """{stream label: its recent window in tokens} for the runs whose policy keeps slots by a per-head score
        (heads hold different tokens, so whether a value is kept is a share, not 0 or 1)."""
        return {label(p, b, self.n_sink): policy.n_recent(b) for b in self.budgets for p in self.policies
                if (policy := make_policy(p, b, n_sink=self.n_sink)).scored}


def label(policy: str, budget: int | None, n_sink: int) -> str:
    if budget is None:
        return FULL
    if policy == "sinks":
        return f"sinks {n_sink}+{budget - n_sink}"
    return f"{policy} {budget}"


def _jobs(cfg: StreamEvalConfig) -> dict[str, tuple]:
    jobs = {}
    if cfg.lines:
        jobs[label(FULL, None, 0)] = (stream_job, cfg, FULL, None)
        jobs |= {label(p, b, cfg.n_sink): (stream_job, cfg, p, b) for b in cfg.budgets for p in cfg.policies}
    if cfg.passkey_length:
        for p in (FULL, *cfg.policies):
            b = None if p == FULL else cfg.passkey_budget
            jobs[f"passkey: {label(p, b, cfg.n_sink)}"] = (passkey_job, cfg, p, b)
    return jobs


def _run_jobs(cfg: StreamEvalConfig, ctx) -> dict[str, dict]:
    validate(cfg)
    jobs = _jobs(cfg)
    with ctx.progress(len(jobs), f"streams ({cfg.workers} at once)") as bar:
        return run_jobs(jobs, cfg.workers, bar)


def _accuracy(answers: list[dict], keep=lambda a: True) -> float:
    picked = [a["correct"] for a in answers if keep(a)]
    return float(np.mean(picked)) if picked else float("nan")


def _claims(cfg: StreamEvalConfig, runs: dict[str, dict]) -> list:
    dense = runs[FULL]["answers"]
    near, far = min(cfg.distances), max(cfg.distances)
    out = [check(f"the full cache does not forget within the context: accuracy at {far} lines over accuracy at {near} "
                 f"lines ({_accuracy(dense, lambda a: a['nominal'] == far):.2f} / "
                 f"{_accuracy(dense, lambda a: a['nominal'] == near):.2f})",
                 _accuracy(dense, lambda a: a["nominal"] == far)
                 / max(1e-9, _accuracy(dense, lambda a: a["nominal"] == near)),
                 cfg.dense_keeps, 0, "at_least")]
    for b in cfg.budgets:
        sinks = runs.get(label("sinks", b, cfg.n_sink), {}).get("answers")
        if sinks is None:
            continue
        inside = {i for i, a in enumerate(sinks) if a["kept"] == 1.0}
        acc_in = _accuracy([a for i, a in enumerate(sinks) if i in inside])
        dense_in = _accuracy([a for i, a in enumerate(dense) if i in inside])
        out.append(check(f"sinks {cfg.n_sink}+{b - cfg.n_sink}: inside the window ({len(inside)} queries) accuracy "
                         f"over the full cache's on the same queries ({acc_in:.2f} / {dense_in:.2f})",
                         acc_in / max(1e-9, dense_in), cfg.inside_vs_dense, 0, "at_least"))
        out.append(finding(f"sinks {cfg.n_sink}+{b - cfg.n_sink}: once the value is evicted "
                           f"({len(sinks) - len(inside)} queries), accuracy",
                           _accuracy([a for i, a in enumerate(sinks) if i not in inside])))
        both = runs.get(label("sinks+h2o", b, cfg.n_sink), {}).get("answers")
        if both is not None:
            recent = cfg.recent_windows()[label("sinks+h2o", b, cfg.n_sink)]
            old = [i for i, a in enumerate(both) if a["token_distance"] > recent]
            gain = sum(both[i]["correct"] for i in old) - sum(sinks[i]["correct"] for i in old)
            out.append(check(f"StreamH2O at budget {b}: of the {len(old)} queries older than its recent window "
                             f"({recent} tokens), sinks+h2o answers more than sinks+window (right answers, "
                             f"sinks+h2o minus sinks+window; {sum(both[i]['correct'] for i in old)} vs "
                             f"{sum(sinks[i]['correct'] for i in old)})", gain, 1, 0, "at_least"))
    return out


def _findings(cfg: StreamEvalConfig, runs: dict[str, dict]) -> list:
    out, recent = [], cfg.recent_windows()
    for name, r in runs.items():
        if "answers" in r and name in recent:
            old = [a for a in r["answers"] if a["token_distance"] > recent[name]]
            for ok in (True, False):
                kept = [a["kept"] for a in old if a["correct"] is ok]
                out.append(finding(f"{name}: share of (layer, KV head) pairs holding the value beyond the recent "
                                   "window, "
                                   f"{'right' if ok else 'wrong'} answers ({len(kept)})",
                                   float(np.mean(kept)) if kept else float("nan")))
        if "passkey" in r and name.endswith(FULL):
            out.append(finding(f"{name}: passkey accuracy over depths {cfg.passkey_depths} at {cfg.passkey_length} "
                               "tokens", _accuracy(r["passkey"])))
    return out


def _passkey_claims(cfg: StreamEvalConfig, runs: dict[str, dict]) -> list:
    """Each policy's passkey accuracy, and the seed's statements about H2O checked against sinks+window's."""
    found = {p: runs[f"passkey: {label(p, cfg.passkey_budget, cfg.n_sink)}"]["passkey"] for p in cfg.policies}
    out = [finding(f"passkey: {label(p, cfg.passkey_budget, cfg.n_sink)}: passkey accuracy over depths "
                   f"{cfg.passkey_depths} at {cfg.passkey_length} tokens", _accuracy(rows))
           for p, rows in found.items()]
    said = {"h2o": "StreamingLLM is a subset of H2O (the seed)",
            "sinks+h2o": "StreamH2O (the seed: heavy hitters help with what is lost in the middle)"}
    for p in [p for p in said if p in found and "sinks" in found]:
        rows, base = found[p], found["sinks"]
        right, right_base = sum(r["correct"] for r in rows), sum(r["correct"] for r in base)
        c = check(f"passkey at budget {cfg.passkey_budget}, {said[p]}: {p} finds at least as many of the {len(rows)} "
                  f"passkeys as sinks+window ({right} vs {right_base}; depths {cfg.passkey_depths}, "
                  f"{cfg.passkey_length} tokens): {p} minus sinks+window", right - right_base, 0, 0, "at_least")
        held = ", ".join(f"{r['kept']:.2f}" for r in rows)
        held_base = ", ".join(f"{r['kept']:.2f}" for r in base)
        recent = make_policy(p, cfg.passkey_budget, n_sink=cfg.n_sink).n_recent(cfg.passkey_budget)
        out.append(c if c.holds else c.because(
            f"share of (layer, KV head) pairs holding the passkey at the question, by depth: {held} (sinks+window: "
            f"{held_base}); {p} keeps a recent window of {recent} of its {cfg.passkey_budget} slots and spends the "
            "rest on heavy hitters: a share of 0 where sinks+window holds 1 is a passkey inside sinks+window's "
            "window but outside its own, and not a heavy hitter"))
    return out


@register("streameval", "What eviction forgets: StreamEval (LongEval lines, a query every few lines) and passkey, "
          "answered in place through full / sinks / h2o / sinks+h2o caches of equal budgets.", StreamEvalConfig,
          quick={"lines": 9, "query_every": 3, "distances": (2, 6), "budgets": (160,), "policies": ("sinks",),
                 "passkey_length": 0, "workers": 1, "answer_tokens": 5, "checked": False})
def run_streameval_experiment(cfg: StreamEvalConfig, ctx) -> Result:
    runs = _run_jobs(cfg, ctx)
    streams = {k: v for k, v in runs.items() if "answers" in v}
    claims = (_claims(cfg, streams) if streams else []) + (_passkey_claims(cfg, runs) if cfg.passkey_length else [])
    if not cfg.checked:
        claims = _undecided(cfg, runs, claims)
    if streams:
        premise = _premise(cfg, streams[FULL]["answers"])
        claims = [premise] + _gate(premise, claims)
    claims += _findings(cfg, runs)
    figures, table, summary = [], None, f"{cfg.model}: the passkey alone (lines=0)."
    if streams:
        figures = [ctx.savefig(accuracy_figure(streams, cfg.distances), "streameval_accuracy.png")]
        if scored := [k for k in streams if k in cfg.recent_windows()]:
            figures.append(ctx.savefig(kept_figure(streams, scored, cfg.distances), "streameval_kept.png"))
        table = _table(cfg, streams)
        summary = (f"{cfg.model}: a stream of {cfg.lines} lines ({runs[FULL]['tokens']:,} tokens with the queries), "
                   f"a query every {cfg.query_every} lines at distances {cfg.distances} lines, {cfg.answer_tokens} "
                   f"answer tokens generated in place, positions {cfg.positions}.\n\n" + _markdown(table, streams))
    metrics = {"config": asdict(cfg), "runs": runs, "table": table}
    captions = {"streameval_accuracy.png": "Accuracy per cache (rows) and query-answer distance (columns, lines; mean "
                                           "tokens below), as in the seed's StreamEval table.",
                "streameval_kept.png": "Policies that keep slots by a per-head score (H2O family, knorm): share of "
                                       "(layer, KV head) pairs that still held the value when the answer began, by "
                                       "distance, for right and wrong answers."}
    return Result(claims, metrics, {f: captions[f] for f in figures}, summary)


def _premise(cfg: StreamEvalConfig, dense: list[dict]) -> Claim:
    """Claim 0: the full cache answers the stream's queries (>= ``full_answers``, by the exact interval)."""
    hit = np.array([a["correct"] for a in dense], dtype=bool)
    return check(f"the full cache answers the stream's queries (the premise): {int(hit.sum())} of {hit.size} right",
                 hit.mean(), cfg.full_answers, 0, "at_least", interval=rate_interval(hit), n=hit.size, method=EXACT)


def _gate(premise: Claim, claims: list[Claim]) -> list[Claim]:
    """The stream's claims, unresolved where the premise does not hold (the passkey's keep their verdicts)."""
    if premise.holds is True:
        return claims
    why = (f"the full cache answers {premise.measured:.0%} of the queries, short of the premise: what eviction "
           "forgets cannot be told apart from what the model never knew")
    return [c if c.claim.startswith("passkey") else undecided(c, why) for c in claims]


def _undecided(cfg: StreamEvalConfig, runs: dict[str, dict], claims: list) -> list:
    """The quick scale's claims: unresolved, with how few queries there were (its findings stay findings)."""
    asked = len(runs[FULL]["answers"]) if FULL in runs else 0
    why = (f"checked=False (the quick stream): {asked} queries over {cfg.lines} lines, a ratio or count over so few "
           "cannot decide it")
    return [Claim(c.claim, c.measured, c.expected, c.tolerance, None, c.test, note=why) if c.test else c
            for c in claims]


def _table(cfg, streams: dict[str, dict]) -> dict:
    """{cache: {distance: accuracy}} plus the mean token distance per nominal line distance."""
    dense = streams[FULL]["answers"]
    tokens = {d: float(np.mean([a["token_distance"] for a in dense if a["nominal"] == d])) for d in cfg.distances}
    acc = {k: {d: _accuracy(r["answers"], lambda a, d=d: a["nominal"] == d) for d in cfg.distances}
           for k, r in streams.items()}
    return {"token_distance": tokens, "accuracy": acc}


def _markdown(table: dict, streams: dict) -> str:
    caches = list(table["accuracy"])
    rows = ["| lines | tokens | " + " | ".join(caches) + " |", "|---|---|" + "---|" * len(caches)]
    for d, t in table["token_distance"].items():
        rows.append(f"| {d} | {t:.0f} | " + " | ".join(f"{100 * table['accuracy'][c][d]:.0f}" for c in caches) + " |")
    return "Accuracy (%):\n\n" + "\n".join(rows)
