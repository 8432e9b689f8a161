"""The sinks-from-scratch premises: a claim about a sink is decided only on a model that learned the text and
grew one (issue 52: a control that did not learn the task cannot show an intervention removes anything)."""
import torch

from attnlab.experiments.claims import check
from attnlab.sinks.premises import learns_text, needs_a_sink, sink_verdict
from attnlab.sinks.pretrain import unigram_nll


def _sink(rate: float):
    return check("a sink emerges", rate, 0.2, 0, "at_least")


def test_unigram_nll_is_the_add_one_cross_entropy():
    train, held = torch.tensor([0, 0, 0, 1]), torch.tensor([0, 2])
    p = torch.tensor([4.0, 2.0, 1.0]) / 7  # counts + 1 over V=3
    assert abs(unigram_nll(train, held, 3) - float(-(p[0].log() + p[2].log()) / 2)) < 1e-6


def test_learning_the_text_means_beating_the_unigram():
    assert learns_text("m", 4.0, 5.0).status == "holds" and learns_text("m", 5.5, 5.0).status == "fails"


def test_a_missing_sink_is_failed_only_by_a_full_run_of_a_model_that_learned():
    learned, unlearned = learns_text("m", 4.0, 5.0), learns_text("m", 5.5, 5.0)
    assert sink_verdict(_sink(0.0), learned, quick=False, steps=500).status == "fails"
    assert sink_verdict(_sink(0.0), learned, quick=True, steps=120).status == "unresolved"
    assert sink_verdict(_sink(0.0), unlearned, quick=False, steps=500).status == "unresolved"
    assert sink_verdict(_sink(0.5), unlearned, quick=True, steps=120).status == "holds"  # a sink is a sink


def test_claims_about_removing_a_sink_are_unresolved_without_one():
    claims = [check("X lowers the sink", 0.5, 0.8, 0, "at_most"), check("evicting it hurts", 1.0, 1.25, 0, "at_least")]
    assert [c.status for c in needs_a_sink(claims, _sink(0.5))] == ["holds", "fails"]
    gated = needs_a_sink(claims, _sink(0.0))
    assert [c.status for c in gated] == ["unresolved"] * 2 and all("no sink" in c.note for c in gated)
    assert [c.measured for c in gated] == [0.5, 1.0]  # the numbers stay, the verdict goes
