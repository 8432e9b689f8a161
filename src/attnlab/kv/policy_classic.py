"""The classic policies, registered as :mod:`attnlab.kv.policies` describes them: ``full``, ``window``, ``sinks``
(StreamingLLM), ``h2o`` (H2O), ``sinks+h2o`` (StreamH2O) and ``knorm`` (Devoto et al.); the newer ones are a file
each beside this one (``policy_tova.py``, ``policy_snapkv.py``, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.kv.policies import KEEP, KVPolicy, SlotState, register


def _recent(s: SlotState, n: int) -> torch.Tensor:  # (B, H, S) bool: among the last n tokens
    return s.pos >= s.seen - n


def _sink(s: SlotState, n: int) -> torch.Tensor:  # (B, H, S) bool: among each row's first n real tokens
    return (s.pos >= s.first) & (s.pos < s.first + n)


@register
@dataclass(frozen=True)
class Full(KVPolicy):
    needs_budget = False
    name = "full"
    about = "never evicts (the dense cache)"

    @classmethod
    def from_options(cls, budget, **options) -> KVPolicy:
        return cls()  # whatever the budget: the dense cache

    def capacity(self, seen: int) -> int | None:
        return None

    def label(self) -> str:
        return "dense"


@register
@dataclass(frozen=True)
class Window(KVPolicy):
    """The most recent tokens: priority = position."""

    name = "window"
    about = "the last budget tokens (window attention)"

    def label(self) -> str:
        return f"window 0+{self.budget}"


@register
@dataclass(frozen=True)
class Sinks(KVPolicy):
    n_sink: int = 4
    name = "sinks"
    about = "StreamingLLM: the first n_sink tokens (attention sinks) and the most recent ones"

    def reserved(self) -> int:
        return self.n_sink

    def n_recent(self, capacity: int) -> int:
        return capacity - self.n_sink

    def priority(self, s: SlotState) -> torch.Tensor:
        return s.pos.to(torch.float32).masked_fill(_sink(s, self.n_sink), KEEP)

    def describe(self) -> str:
        return f"sinks({self.n_sink})+window(budget={self.budget})"

    def label(self) -> str:
        return f"sinks {self.n_sink}+{self.budget - self.n_sink}"


@register
@dataclass(frozen=True)
class H2O(KVPolicy):
    recent: int | None = None  # None: half the budget
    n_sink: int = field(default=0, init=False)  # H2O alone keeps no sinks (sinks+h2o below does)
    needs_scores = True
    scored = True
    name = "h2o"
    about = "H2O: a recent window and the older tokens with the most accumulated attention, per KV head"

    def n_recent(self, capacity: int) -> int:
        return capacity // 2 if self.recent is None else self.recent

    def reserved(self) -> int:
        return self.n_sink + (self.recent or 0)

    def priority(self, s: SlotState) -> torch.Tensor:
        cap = self.capacity(s.seen) or s.pos.shape[-1]
        keep = _recent(s, self.n_recent(cap))
        if self.n_sink:
            keep |= _sink(s, self.n_sink)
        return s.score.masked_fill(keep, KEEP)

    def describe(self) -> str:
        sinks = f"sinks({self.n_sink})+" if self.n_sink else ""
        return f"{sinks}h2o(budget={self.budget}, recent={self.recent or 'budget/2'})"

    def label(self) -> str:
        r = self.n_recent(self.budget)
        return f"h2o {self.budget - r} heavy+{r} recent"


@register
@dataclass(frozen=True)
class SinksH2O(H2O):
    """StreamH2O: H2O's heavy hitters and recent window, and the first ``n_sink`` tokens always kept."""

    n_sink: int = 4
    name = "sinks+h2o"
    about = "StreamH2O: sinks, heavy hitters and a recent window"

    def label(self) -> str:
        r = self.n_recent(self.budget)
        return f"sinks+h2o {self.n_sink}+{self.budget - self.n_sink - r}+{r}"


@register
@dataclass(frozen=True)
class KNorm(KVPolicy):
    """Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression": per layer
    and KV head, keep the tokens whose keys have the *smallest* L2 norm (a low-norm key draws high attention,
    so the key alone predicts what later queries will read; no attention is needed, nor materialised).

    Nothing is protected: no sinks, no recent window, as in the authors' code and kvpress's KnormPress (the
    first token's key tends to have a low norm, so the rule itself keeps the sink). The authors' example
    leaves layers 0 and 1 uncompressed; a policy here applies to every layer alike, as KnormPress does.
    The norm is of the stored, post-RoPE key, and it equals the pre-RoPE key's: RoPE rotates each pair of
    channels, which keeps its length (and rolling positions' re-rotation keeps it too)."""

    scored = True
    reads_keys = True
    name = "knorm"
    about = "Devoto et al.: the tokens whose keys have the smallest L2 norm, per KV head"

    def n_recent(self, capacity: int) -> int:
        return 0

    def priority(self, s: SlotState) -> torch.Tensor:
        at = torch.promote_types(s.keys.dtype, torch.float32)  # float32 at least (half keys); float64 stays
        return -torch.linalg.vector_norm(s.keys, dim=-1, dtype=at)  # (B, H, S): high norm goes first
