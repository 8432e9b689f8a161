"""``sink-backcopy``'s interventions, each judged only against a model that learned the task.

"X removes the sink" compares an intervention's 1-layer model with the control: the 1-layer softmax model under
Adam, read at the same step. A model that has not learned Bigram-Backcopy has no sink *and* no copy, so a missing
sink there says nothing about X. So each claim is decided (by :func:`attnlab.experiments.claims.check`) only when
the intervention's run and the control both reached competence, and only when the control shows what X is said to
remove; otherwise it is *unresolved*, the reason its note (:func:`decide`).

Competence is the *copy share* (:mod:`attnlab.sinks.bb_train`): on trigger queries, the attention to the token
before over the row's whole attention mass, at least ``competent_min`` at the end. Why the share, not the raw copy
weight: ReLU attention's rows (relu(x)/n) need not sum to 1 (its raw copy weight read 4.09 in one run), softmax1's
and a sink logit's sum to less; the share is scale-free and equals the raw copy wherever rows sum to 1, so one threshold
means the same for every variant. Why not the loss over the Bayes floor: that mixes the bigram (the MLP's job)
with the copy (the head's), while the sink is a property of the head; the loss is reported beside it.

SGD's learning rate is swept (a rate too small for the budget is the plainest way for SGD not to learn), and its
claims are decided at the best-learning rate (:func:`best_rate`). Per intervention, its effect on each of the
three extreme-token phenomena is stated apart: the sink, the value drain, the residual peak. The paper's two
interventions (ReLU attention, SGD) are checked claims, "removed" read with the threshold of the control's own
claim (the drain: BOS's value ratio at least ``drain_max``; the peak: its residual ratio at most ``peak_min``), the
sink with its own, lower one (``removed_max``, below ``sink_min``); the softmax variants are findings. Torch-free.
"""
from __future__ import annotations

import math

from attnlab.experiments.claims import TESTS, Claim, check, finding

CLAIMED = {"relu": "ReLU attention", "sgd": "SGD instead of Adam"}  # the paper's interventions: checked claims

# effect -> (the layer's key, its name, what is measured; "removed" as a test against a config field; "present in
# the control" as a test against a config field). The thresholds are the control's claims': the sink has a gap
# (present >= sink_min, removed <= removed_max), the drain and the peak reuse their one threshold
EFFECTS = {
    "sink": ("dormant", "the sink", "attention to BOS from non-trigger queries", ("at_most", "removed_max"),
             ("at_least", "sink_min")),
    "drain": ("value_ratio", "the value drain", "BOS's value norm over the others' median", ("at_least", "drain_max"),
              ("at_most", "drain_max")),
    "peak": ("resid_ratio", "the residual peak", "BOS's residual norm over the others' median",
             ("at_most", "peak_min"), ("at_least", "peak_min")),
}


def sgd_name(lr: float) -> str:
    return f"sgd-lr{lr:g}"


def incompetent(name: str, share: float, share_min: float) -> str | None:
    """Why ``name``'s run cannot speak for the task (None: it learned it): its copy share below ``share_min``."""
    if math.isnan(share) or share < share_min:
        return f"{name} did not learn the task (copy share {share:.2f} < {share_min:g})"
    return None


def decide(claim: str, measured: float, expected: float, test: str, blockers: list[str | None]) -> Claim:
    """The check's verdict (holds or fails) when no blocker stands; otherwise the same claim *unresolved*
    (holds None), the blockers its note: the data cannot decide it."""
    reasons = [b for b in blockers if b]
    if not reasons:
        return check(claim, measured, expected, 0.0, test)
    return Claim(claim, float(measured), float(expected), 0.0, None, test, note="; ".join(reasons))


def at_step(track: list[dict], step: int) -> dict:
    """The tracked point at ``step`` (the last one before it if it was not tracked)."""
    return [t for t in track if t["step"] <= step][-1]


def sweep_rows(tracks: dict[str, list[dict]], lrs, share_min: float) -> list[dict]:
    """Per SGD learning rate, its run's values at the end."""
    rows = []
    for lr in lrs:
        last = tracks[sgd_name(lr)][-1]
        e = last["layers"][0]
        rows.append({"lr": lr, "copy": e["copy"], "copy_share": e["copy_share"], "dormant": e["dormant"],
                     "value_ratio": e["value_ratio"], "resid_ratio": e["resid_ratio"],
                     "loss_over_bayes": last["loss"] - last["bayes"],
                     "competent": incompetent("", e["copy_share"], share_min) is None})
    return rows


def best_rate(rows: list[dict]) -> dict:
    """The best-learning rate's row: the lowest loss over the Bayes floor among the runs that reached competence,
    or among all when none did (its claims are then unresolved); a diverged run (NaN) last. Chosen blind to the
    sink."""
    pool = [r for r in rows if r["competent"]] or rows
    return min(pool, key=lambda r: math.inf if math.isnan(r["loss_over_bayes"]) else r["loss_over_bayes"])


def summaries(cfg, tracks: dict[str, list[dict]], sgd_lr: float | None) -> dict[str, dict]:
    """Per intervention, its run (SGD's at ``sgd_lr``) at the end: what the claims read, by the intervention's name."""
    out = {}
    for name in cfg.interventions:
        run = sgd_name(sgd_lr) if name == "sgd" else name
        last = tracks[run][-1]
        e = last["layers"][0]
        out[name] = {"run": run, "lr": sgd_lr if name == "sgd" else cfg.lr, "step": last["step"],
                     **{k: e[k] for k in ("dormant", "active", "copy", "copy_share", "value_ratio", "resid_ratio")},
                     "loss_over_bayes": last["loss"] - last["bayes"],
                     "competent": incompetent("", e["copy_share"], cfg.competent_min) is None}
    return out


def sweep_table(cfg, rows: list[dict], chosen: float | None) -> str:
    """The SGD sweep as a markdown paragraph and table ("" when SGD was not run)."""
    if not rows:
        return ""
    lines = ["| SGD lr | copy | copy share | learned the task | dormant → BOS | value ratio | residual ratio | "
             "loss - Bayes |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['lr']:g}{' (decides)' if r['lr'] == chosen else ''} | {r['copy']:.3f} | {r['copy_share']:.3f} | "
              f"{'yes' if r['competent'] else 'no'} | {r['dormant']:.3f} | {r['value_ratio']:.3f} | "
              f"{r['resid_ratio']:.2f} | {r['loss_over_bayes']:.4f} |" for r in rows]
    return (f"\n\nThe SGD sweep ({cfg.steps} steps each; learned the task: copy share >= {cfg.competent_min:g}). Its "
            "claims are decided at the best-learning rate: the lowest loss over the Bayes floor among the rates that "
            "learned the task (among all if none did; the claims are then unresolved):\n\n" + "\n".join(lines))


def intervention_claims(cfg, tracks: dict[str, list[dict]], sgd_lr: float | None) -> list[Claim]:
    """Per intervention in ``cfg.interventions`` (SGD at ``sgd_lr``), its effect on the sink, the drain and the
    peak against the control at the same step: a gated claim for ReLU and SGD, a finding for the variants."""
    out = []
    control = tracks["1-layer"]
    for name in cfg.interventions:
        run = tracks[sgd_name(sgd_lr) if name == "sgd" else name]
        end = run[-1]["layers"][0]
        ref = at_step(control, run[-1]["step"])["layers"][0]
        label = CLAIMED.get(name, name)
        rate = f"SGD lr {sgd_lr:g}; " if name == "sgd" else ""
        who = f"SGD at lr {sgd_lr:g}" if name == "sgd" else label
        learned = [incompetent(who, end["copy_share"], cfg.competent_min),
                   incompetent("the control", ref["copy_share"], cfg.competent_min)]
        for key, short, what, (test, field), (has, has_field) in EFFECTS.values():
            when = (f"{what} at step {run[-1]['step']} ({rate}the control: {ref[key]:.3f}; copy share "
                    f"{end['copy_share']:.2f})")
            if name not in CLAIMED:
                out.append(_variant_finding(f"{label}, {short}: {when}", end[key], learned))
                continue
            there = TESTS[has][1](ref[key], getattr(cfg, has_field), 0)
            absent = None if there else (f"the control has no {short.removeprefix('the ')} to remove ({ref[key]:.3f}; "
                                         f"its claim's threshold {getattr(cfg, has_field):g})")
            out.append(decide(f"{label} removes {short}: {when}", end[key], getattr(cfg, field), test,
                              learned + [absent]))
    return out


def _variant_finding(text: str, measured: float, blockers: list[str | None]) -> Claim:
    f = finding(text, measured)
    reasons = [b for b in blockers if b]
    return f.because("not comparable: " + "; ".join(reasons)) if reasons else f
