"""Several KV policies replayed as the rows of one batch: one forward per step serves them all (a CPU decode
step is bound by reading the weights, so four rows cost little more than one). ``attnlab view`` replays its
policies this way. Pure torch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.kv.policies import KVPolicy, SlotState


def same_capacity(policy: KVPolicy) -> tuple:
    """Equal for two policies exactly when they keep the same number of slots at every length: a token budget
    (or none) is the capacity itself; a fraction's capacity also depends on the slots the policy reserves."""
    fraction = isinstance(policy.budget, float) and policy.budget < 1
    return (policy.capacity(1) is None, policy.budget, policy.reserved() if fraction else None)


@dataclass(frozen=True)
class RowPolicies(KVPolicy):
    """Batch row b evicts by ``rows[b]``: one batched forward of the same text replays several policies (a CPU
    decode step is bound by reading the weights, so four rows cost little more than one). Not a name in the
    registry: a composition of its policies, which must keep the same number of slots at every length."""

    rows: tuple[KVPolicy, ...] = ()
    name = "rows"

    def __post_init__(self):
        if not self.rows or len({same_capacity(p) for p in self.rows}) > 1:
            raise UsageError("RowPolicies: give policies with one budget (each row keeps the same number of slots)")
        object.__setattr__(self, "budget", self.rows[0].budget)

    @property
    def needs_scores(self) -> bool:  # the layer keeps scores when any row's policy reads them
        return any(p.needs_scores for p in self.rows)

    def capacity(self, seen: int) -> int | None:
        return self.rows[0].capacity(seen)

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S), row b by rows[b]
        def row(b: int) -> SlotState:
            take = (lambda t: None if t is None else t[b:b + 1])
            return SlotState(pos=take(s.pos), seen=s.seen, score=take(s.score), first=take(s.first), keys=take(s.keys))

        return torch.cat([p.priority(row(b)) for b, p in enumerate(self.rows)])

    def describe(self) -> str:
        return " | ".join(p.describe() for p in self.rows)
