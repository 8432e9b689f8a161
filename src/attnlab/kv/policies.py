"""KV-cache policies: each decides only *what to keep*.

A policy sees, per layer, the metadata of the stored slots and returns a priority per slot;
the cache keeps the ``budget`` slots of highest priority and evicts the rest (storing and RoPE
re-rotation live in :mod:`attnlab.kv.cache`, attention in :mod:`attnlab.kv.attention`). So the
methods differ only in their priorities, as in the papers:

- ``full``       never evicts (the dense baseline).
- ``window``     the last ``budget`` tokens (window attention: evicts the first tokens).
- ``sinks``      StreamingLLM: the first ``n_sink`` tokens (attention sinks) + the last
                 ``budget - n_sink`` tokens.
- ``h2o``        H2O: the last ``recent`` tokens + the ``budget - recent`` older tokens with the
                 largest accumulated attention (summed over every query since the token entered,
                 prefill rows included, per layer and KV head, over the query heads of its group).
- ``sinks+h2o``  StreamH2O: sinks + heavy hitters + recent window.

``budget`` is a token count, or a fraction in (0, 1) of the tokens seen so far (H2O's "20%").
Selection is per KV head: each head keeps its own tokens; the stored tensors all have the same
length, so they stay one (B, H_kv, S, D) tensor. A new policy is a class (its priority) plus its
line in ``POLICIES``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry

KEEP = float("inf")  # priority of a token the policy must keep (sink or recent)


@dataclass
class SlotState:
    """What a policy may look at, for one layer (B batch, H KV heads, S stored slots)."""

    pos: torch.Tensor  # (B, H, S) long: index of the token in its stream (0 = first token seen)
    seen: int  # tokens seen so far (stream length, padding included)
    score: torch.Tensor | None  # (B, H, S) accumulated attention, for policies with needs_scores
    first: torch.Tensor  # (B, 1, 1) long: index of each row's first real (non-padding) token


@dataclass(frozen=True)
class KVPolicy:
    """Base: ``budget`` tokens kept (None: keep everything)."""

    budget: int | float | None = None
    needs_scores = False  # True: the attention function accumulates attention into SlotState.score
    needs_budget = True  # False: the policy keeps everything
    name = "full"

    def capacity(self, seen: int) -> int | None:
        """How many slots may stay stored after ``seen`` tokens (None: unbounded)."""
        if self.budget is None:
            return None
        if isinstance(self.budget, float) and self.budget < 1:
            return max(self.reserved() + 1, math.ceil(self.budget * seen))
        return int(self.budget)

    def reserved(self) -> int:
        """Slots always kept (sinks + recent); the budget must exceed it."""
        return 0

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        return s.pos.to(torch.float32)

    def describe(self) -> str:
        return self.name if self.budget is None else f"{self.name}(budget={self.budget})"


def _recent(s: SlotState, n: int) -> torch.Tensor:  # (B, H, S) bool: among the last n tokens
    return s.pos >= s.seen - n


def _sink(s: SlotState, n: int) -> torch.Tensor:  # (B, H, S) bool: among each row's first n real tokens
    return (s.pos >= s.first) & (s.pos < s.first + n)


@dataclass(frozen=True)
class Full(KVPolicy):
    needs_budget = False
    name = "full"

    def capacity(self, seen: int) -> int | None:
        return None


@dataclass(frozen=True)
class Window(KVPolicy):
    """The most recent tokens: priority = position."""

    name = "window"


@dataclass(frozen=True)
class Sinks(KVPolicy):
    n_sink: int = 4
    name = "sinks"

    def reserved(self) -> int:
        return self.n_sink

    def priority(self, s: SlotState) -> torch.Tensor:
        return s.pos.to(torch.float32).masked_fill(_sink(s, self.n_sink), KEEP)

    def describe(self) -> str:
        return f"sinks({self.n_sink})+window(budget={self.budget})"


@dataclass(frozen=True)
class H2O(KVPolicy):
    recent: int | None = None  # None: half the budget
    n_sink: int = 0
    needs_scores = True
    name = "h2o"

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


# name -> how make_policy's options build it: (budget, n_sink, recent) -> KVPolicy
POLICIES: Registry[Callable[[int | float | None, int, int | None], KVPolicy]] = Registry("KV policy")
POLICIES.add("full", lambda budget, n_sink, recent: Full())
POLICIES.add("window", lambda budget, n_sink, recent: Window(budget))
POLICIES.add("sinks", lambda budget, n_sink, recent: Sinks(budget, n_sink=n_sink))
POLICIES.add("h2o", lambda budget, n_sink, recent: H2O(budget, recent=recent))
POLICIES.add("sinks+h2o", lambda budget, n_sink, recent: H2O(budget, recent=recent, n_sink=n_sink))


def make_policy(name: str, budget: int | float | None = None, n_sink: int = 4,
                recent: int | None = None) -> KVPolicy:
    """A policy by name; one-line errors for unknown names (with the closest) and impossible budgets."""
    policy = POLICIES.get(name)(budget, n_sink, recent)
    if not policy.needs_budget:
        return policy
    if budget is None:
        raise UsageError(f"policy {name!r} needs a budget: tokens (e.g. --budget 256) or a fraction (--budget 0.2)")
    if budget <= 0 or (isinstance(budget, float) and budget >= 1 and not budget.is_integer()):
        raise UsageError(f"budget {budget}: give a token count >= 1 or a fraction in (0, 1)")
    if n_sink < 0 or (recent is not None and recent < 0):
        raise UsageError("n_sink and recent must be >= 0")
    if isinstance(budget, float) and budget >= 1:
        policy = replace(policy, budget=int(budget))
    sinks, kept = getattr(policy, "n_sink", 0), getattr(policy, "recent", None)
    if isinstance(policy.budget, int) and policy.budget < policy.reserved() + 1:
        raise UsageError(f"budget {policy.budget} leaves no room beyond {sinks} sink(s)"
                         + (f" + {kept} recent" if kept else "") + f": use a budget >= {policy.reserved() + 1}")
    return policy
