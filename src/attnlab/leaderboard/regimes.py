"""The two regimes a KV method is compared in, one harness (:mod:`attnlab.leaderboard.harness`) for both.

- ``prefill``: kvpress's setting. The context goes in whole (or in chunks, nothing evicted), then is
  compressed *once* to the ratio, by the policy's own scores of it; the question and the answer are then
  appended and nothing more is evicted. :class:`Once` turns any policy into that.
- ``decode``: what kvpress lacks (its issues #230, #257). The context streams through the policy ``chunk``
  tokens a step at the same budget, evicting as it goes, and so do the question and the answer: the cache
  never holds more than the budget and a step's tokens.

The budget of a compression ratio r over a context of C tokens is k = int((1 - r) C) tokens in both (kvpress's
count). A cache evicts down to its budget before it stores a step's tokens, so when the answer begins each holds
k context tokens and the question: the regimes differ in when, and from what, they chose the k; then the decode
regime's answer tokens evict as decoding goes on. Pure torch: no transformers.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import UsageError
from attnlab.kv.policies import Delegating, KVPolicy

REGIMES = ("prefill", "decode")
RATIOS = (0.25, 0.5, 0.75, 0.875)  # kvpress's leaderboard's compression ratios: the share of the context removed


def kept_tokens(ratio: float, context: int) -> int:
    """The budget a compression ratio leaves of a context: int((1 - ratio) * context), one token at least --
    kvpress's own count (rounded down), so that the two keep as many tokens."""
    if not 0 <= ratio < 1:
        raise UsageError(f"compression ratio {ratio}: give the share of the context removed, in [0, 1)")
    return max(1, int(context * (1 - ratio)))


@dataclass(frozen=True)
class Once(Delegating):
    """``inner`` compresses once, when the cache has seen the ``context``'s tokens and the next ones arrive (the
    question's): down to ``inner``'s capacity at that length; afterwards every new token is kept. Everything
    else -- scores, their folding, the per-layer share -- is ``inner``'s (:class:`Delegating`)."""

    inner: KVPolicy | None = None
    context: int = 0
    name = "once"

    def __post_init__(self):
        if self.inner is None or self.context < 1:
            raise UsageError("Once: give the policy and the context's length in tokens")
        object.__setattr__(self, "budget", self.inner.budget)

    @property
    def needs_budget(self) -> bool:
        return self.inner.needs_budget

    def capacity(self, seen: int) -> int | None:
        if seen < self.context:  # the context is still coming in: nothing is evicted yet
            return None
        kept = self.inner.capacity(self.context)
        return None if kept is None else kept + seen - self.context

    def for_layer(self, layer: int, n_layers: int) -> KVPolicy:
        return Once(inner=self.inner.for_layer(layer, n_layers), context=self.context)

    def describe(self) -> str:
        return f"once({self.inner.describe()}, context={self.context})"

    def label(self) -> str:
        return self.inner.label()


def in_regime(policy: KVPolicy, regime: str, context: int) -> KVPolicy:
    """``policy`` as the regime applies it over a context of ``context`` tokens."""
    if regime not in REGIMES:
        raise UsageError(f"regime {regime!r}: choose {' or '.join(REGIMES)}")
    return Once(inner=policy, context=context) if regime == "prefill" and policy.needs_budget else policy
