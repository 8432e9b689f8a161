"""The competence gate of ``sink-backcopy``'s interventions, on fabricated tracks: a claim is decided (holds or
fails by its check) only when the intervention's model and the control learned the task and the control shows
what the intervention is said to remove; otherwise it is unresolved, with the reason. No training here."""
import math
import types

import pytest

from attnlab.experiments.claims import tally
from attnlab.sinks.interventions import best_rate, decide, incompetent, intervention_claims, sgd_name, sweep_rows

CFG = types.SimpleNamespace(competent_min=0.9, removed_max=0.2, sink_min=0.5, drain_max=0.5, peak_min=2.0,
                            interventions=("relu", "sgd", "softmax1"), sgd_lrs=(0.03, 0.3))


def point(step, share, dormant, value, resid, loss=1.0):
    return {"step": step, "loss": loss, "bayes": 0.9, "layers": [
        {"dormant": dormant, "active": 0.0, "copy": share, "copy_share": share, "value_ratio": value,
         "resid_ratio": resid}]}


@pytest.mark.parametrize("share, why", [(0.95, None), (0.9, None), (0.4, "did not learn"), (math.nan, "did not")])
def test_a_run_below_the_copy_share_is_incompetent(share, why):
    said = incompetent("SGD", share, 0.9)
    assert said is None if why is None else (why in said and "SGD" in said)


@pytest.mark.parametrize("measured, verdict", [(0.01, "holds"), (0.6, "fails")])
def test_a_competent_run_gets_the_checks_verdict(measured, verdict):
    c = decide("X removes the sink", measured, 0.2, "at_most", [incompetent("X", 0.97, 0.9), None])
    assert c.status == verdict and c.holds is (verdict == "holds") and c.note is None


@pytest.mark.parametrize("measured", [0.01, 0.6])  # whatever it measured: an untrained model decides nothing
def test_a_run_below_competence_is_unresolved_with_its_reason(measured):
    c = decide("X removes the sink", measured, 0.2, "at_most", [incompetent("X", 0.40, 0.9), None])
    assert c.status == "unresolved" and c.holds is None and "X did not learn the task" in c.note
    assert c.to_json()["status"] == "unresolved" and c.to_json()["rule"] == "measured <= expected + tolerance"
    assert tally([c])["unresolved"] == 1


def test_best_rate_is_the_lowest_loss_among_the_competent_runs_else_among_all():
    rows = [{"lr": 0.03, "loss_over_bayes": 0.05, "competent": False},
            {"lr": 0.1, "loss_over_bayes": 0.08, "competent": True},
            {"lr": 0.3, "loss_over_bayes": 0.07, "competent": True}]
    assert best_rate(rows)["lr"] == 0.3
    assert best_rate([dict(r, competent=False) for r in rows])["lr"] == 0.03
    diverged = [{"lr": 1.0, "loss_over_bayes": math.nan, "competent": False}] + rows[:1]
    assert best_rate(diverged)["lr"] == 0.03  # a NaN loss is never the best


def fabricated(sgd_share: float, control_resid: float) -> dict:
    """The control: a sink (0.99) and a drain (0.05) at step 20, with or without a residual peak; ReLU learned the
    task and has neither; SGD at the two rates; softmax1 learned it and has no sink."""
    control = [point(0, 0.1, 0.1, 1.0, 1.0), point(10, 0.95, 0.4, 0.8, 1.1), point(20, 0.97, 0.99, 0.05, control_resid),
               point(30, 0.98, 0.99, 0.02, control_resid)]  # the control trains on past the interventions' end
    return {"1-layer": control, "relu": [point(20, 0.99, 0.0, 1.1, 1.2)],
            sgd_name(0.03): [point(20, sgd_share, 0.001, 1.5, 1.2, loss=1.2)],
            sgd_name(0.3): [point(20, 0.3, 0.3, 0.4, 1.3, loss=1.4)],
            "softmax1": [point(20, 0.97, 0.0, 0.6, 1.2)]}


def test_claims_are_gated_per_intervention_and_phenomenon():
    tracks = fabricated(sgd_share=0.4, control_resid=2.5)
    rows = sweep_rows(tracks, CFG.sgd_lrs, CFG.competent_min)
    assert [r["competent"] for r in rows] == [False, False] and best_rate(rows)["lr"] == 0.03
    claims = {c.claim.split(":")[0]: c for c in intervention_claims(CFG, tracks, 0.03)}
    assert [claims[f"ReLU attention removes the {e}"].status for e in ("sink", "value drain", "residual peak")] == \
        ["holds", "holds", "holds"]
    for e in ("sink", "value drain", "residual peak"):  # SGD never learned the task: nothing is decided
        c = claims[f"SGD instead of Adam removes the {e}"]
        assert c.status == "unresolved" and "did not learn the task (copy share 0.40" in c.note
    assert "the control: 0.990" in claims["ReLU attention removes the sink"].claim  # read at the same step (20)
    assert {claims[f"softmax1, the {e}"].status for e in ("sink", "value drain", "residual peak")} == {"finding"}


def test_a_phenomenon_the_control_lacks_is_unresolved_and_a_competent_sgd_is_decided():
    tracks = fabricated(sgd_share=0.95, control_resid=1.3)
    claims = {c.claim.split(":")[0]: c for c in intervention_claims(CFG, tracks, 0.03)}
    peak = claims["ReLU attention removes the residual peak"]
    assert peak.status == "unresolved" and "the control has no residual peak to remove" in peak.note
    assert claims["SGD instead of Adam removes the sink"].status == "holds"
    assert claims["SGD instead of Adam removes the value drain"].status == "holds"  # 1.5 >= 0.5: not drained


def test_a_variant_below_competence_is_a_finding_marked_not_comparable():
    tracks = fabricated(sgd_share=0.95, control_resid=2.5)
    tracks["softmax1"] = [point(20, 0.5, 0.0, 0.6, 1.2)]
    found = [c for c in intervention_claims(CFG, tracks, 0.03) if c.claim.startswith("softmax1")]
    assert len(found) == 3 and all(c.status == "finding" and "not comparable" in c.note for c in found)
