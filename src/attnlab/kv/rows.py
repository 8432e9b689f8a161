"""Several KV policies replayed as the rows of one batch: one forward per step serves them all (a CPU decode
step is bound by reading the weights, so four rows cost little more than one). ``attnlab view`` replays its
policies this way. Pure torch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.kv.policies import KVPolicy, SlotState


def _own(score: torch.Tensor, p: KVPolicy) -> torch.Tensor:
    """A row's score as its policy keeps it: the shared tensor may be wider (another row's window)."""
    return score if score.dim() - 3 == len(p.score_slots()) else score[..., 0]


def same_capacity(policy: KVPolicy) -> tuple:
    """Equal for two policies exactly when they keep the same number of slots at every length: a token budget
    (or none) is the capacity itself; a fraction's capacity also depends on the slots the policy reserves."""
    fraction = isinstance(policy.budget, float) and policy.budget < 1
    spread = type(policy).for_layer is not KVPolicy.for_layer  # its layers keep their own (a pyramid): its own row
    return (policy.capacity(1) is None, policy.budget, policy.reserved() if fraction else None,
            policy.describe() if spread else None)


@dataclass(frozen=True)
class RowPolicies(KVPolicy):
    """Batch row b evicts by ``rows[b]``: one batched forward of the same text replays several policies (a CPU
    decode step is bound by reading the weights, so four rows cost little more than one). Not a name in the
    registry: a composition of its policies, which must keep the same number of slots at every length."""

    rows: tuple[KVPolicy, ...] = ()
    name = "rows"

    def __post_init__(self):
        if not self.rows or len({same_capacity(p) for p in self.rows}) > 1:
            raise UsageError("RowPolicies: give policies with one budget (each row keeps the same number of slots; "
                             "a pyramid's layers keep their own)")
        if len({p.score_slots() for p in self.rows if p.needs_scores} - {()}) > 1:
            raise UsageError("RowPolicies: give at most one observation window (each row's scores share a tensor)")
        object.__setattr__(self, "budget", self.rows[0].budget)

    @property
    def needs_scores(self) -> bool:  # the layer keeps scores when any row's policy reads them
        return any(p.needs_scores for p in self.rows)

    def capacity(self, seen: int) -> int | None:
        return self.rows[0].capacity(seen)

    def score_slots(self) -> tuple[int, ...]:  # the widest row's: a row with one number per slot reads its first
        return max((p.score_slots() for p in self.rows if p.needs_scores), key=len, default=())

    def for_layer(self, layer: int, n_layers: int) -> KVPolicy:
        return RowPolicies(rows=tuple(p.for_layer(layer, n_layers) for p in self.rows))

    def shares_budget(self) -> bool:
        return any(p.shares_budget() for p in self.rows)

    def allocate(self, priority: torch.Tensor, keep: int) -> torch.Tensor:  # row b shared out by rows[b]
        def row(b: int, p: KVPolicy) -> torch.Tensor:
            if p.shares_budget():
                return p.allocate(priority[b:b + 1], keep)
            own = torch.zeros_like(priority[b:b + 1], dtype=torch.bool)  # a head's own top keep
            return own.scatter_(-1, priority[b:b + 1].topk(keep, dim=-1).indices, True)

        return torch.cat([row(b, p) for b, p in enumerate(self.rows)])

    def fold(self, score: torch.Tensor, probs: torch.Tensor) -> None:  # row b's score folded by rows[b]
        for b, p in enumerate(self.rows):
            if p.needs_scores:
                p.fold(_own(score[b:b + 1], p), probs[b:b + 1])

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S), row b by rows[b]
        def row(b: int, p: KVPolicy) -> SlotState:
            take = (lambda t: None if t is None else t[b:b + 1])
            score = None if s.score is None else _own(take(s.score), p)
            return SlotState(pos=take(s.pos), seen=s.seen, score=score, first=take(s.first), keys=take(s.keys))

        return torch.cat([p.priority(row(b, p)) for b, p in enumerate(self.rows)])

    def describe(self) -> str:
        return " | ".join(p.describe() for p in self.rows)
