"""The premises of the sinks-from-scratch claims, and what follows when a run does not meet them.

A chain, each link the premise of the next: the model learns the text (its held-out loss beats the unigram's);
a sink emerges (Gu et al.'s Sink_0^0.3); only then can an intervention remove the sink or an eviction lose it.
A claim whose premise is not met is *unresolved*, with why: an untrained model has no sink, and "X removes the
sink" holds trivially against a model without one (issue 52's SGD control). A quick run too short to grow a
sink leaves the sink unresolved rather than failed; the full settings decide it.
"""
from __future__ import annotations

from attnlab.experiments.claims import Claim, check, undecided


def learns_text(who: str, valid_loss: float, unigram_nll: float) -> Claim:
    """``who``'s held-out loss is below the unigram's: it learned more than token frequencies."""
    return check(f"{who} learns the text beyond its token frequencies (the premise of a sink): held-out loss (nats) "
                 f"below the training text's unigram's, {unigram_nll:.3f}", valid_loss, unigram_nll, 0, "at_most")


def sink_verdict(sink: Claim, learns: Claim | None, quick: bool, steps: int) -> Claim:
    """``sink`` ("a sink emerges") as decided, or unresolved where this run cannot decide it: its model did
    not learn the text (``learns``; None: not asked), or a quick run's few steps found none."""
    if sink.holds is not False:
        return sink
    if learns is not None and learns.holds is not True:
        return undecided(sink, "the model did not learn the text beyond its token frequencies (the claim above), so "
                               "its lack of a sink says nothing about when sinks form: train longer")
    if quick:
        return undecided(sink, f"the quick run's {steps} steps are too few to grow a sink; the full settings "
                               "decide it")
    return sink


def needs_a_sink(claims: list[Claim], sink: Claim) -> list[Claim]:
    """``claims`` about the sink (removing it, evicting it, what it does): unresolved unless ``sink`` holds."""
    if sink.holds is True:
        return claims
    why = (f"no sink formed in this run ({sink.measured:.2f}, a sink from {sink.expected:g}): nothing to remove, "
           "drain or lose by eviction, so the run cannot decide this claim")
    return [c if c.status == "unresolved" else undecided(c, why) for c in claims]  # keep an earlier reason
