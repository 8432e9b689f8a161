"""KV-cache policies: each decides only *what to keep*.

A policy sees, per layer, the stored slots (their stream positions, keys and, for H2O, accumulated
attention) and returns a priority per slot; the cache keeps the ``budget`` slots of highest priority and
evicts the rest (storing and RoPE re-rotation live in :mod:`attnlab.kv.cache`, attention in
:mod:`attnlab.kv.attention`). So the methods differ only in their priorities, as in the papers:

- ``full``       never evicts (the dense baseline).
- ``window``     the last ``budget`` tokens (window attention: evicts the first tokens).
- ``sinks``      StreamingLLM: the first ``n_sink`` tokens (attention sinks) + the last
                 ``budget - n_sink`` tokens.
- ``h2o``        H2O: the last ``recent`` tokens + the ``budget - recent`` older tokens with the
                 largest accumulated attention (summed over every query since the token entered,
                 prefill rows included, per layer and KV head, over the query heads of its group).
- ``sinks+h2o``  StreamH2O: sinks + heavy hitters + recent window.
- ``knorm``      Devoto et al. 2024: the ``budget`` tokens whose keys have the smallest L2 norm.

``budget`` is a token count, or a fraction in (0, 1) of the tokens seen so far (H2O's "20%").
Selection is per KV head: each head keeps its own tokens; the stored tensors all have the same
length, so they stay one (B, H_kv, S, D) tensor.

The registry ``POLICIES`` maps each name to its class, and everything that names policies reads it
(``attnlab stream --policy``, the experiments' configs, the tests). A new policy is one class here,
decorated with ``@register``, plus its test: its ``priority``, its ``name``, and its options as
dataclass fields (``make_policy`` hands each policy the options it has fields for; ``from_options``
is the seam for one that builds itself differently).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace

import torch

from attnlab.core.errors import UsageError, check_number
from attnlab.core.metrics import received_attention
from attnlab.core.registry import Registry, files

KEEP = float("inf")  # priority of a token the policy must keep (sink or recent)
POSITIONS = ("original", "rolling")  # where kept tokens sit: their stream positions, or their ranks in the cache


@dataclass
class SlotState:
    """What a policy may look at, for one layer (B batch, H KV heads, S stored slots, D head dim).
    The tensors are the layer's own (views, never copies): a policy reads them and writes nothing."""

    pos: torch.Tensor  # (B, H, S) long: index of the token in its stream (0 = first token seen)
    seen: int  # tokens seen so far (stream length, padding included)
    score: torch.Tensor | None  # (B, H, S) accumulated attention, for policies with needs_scores
    first: torch.Tensor  # (B, 1, 1) long: index of each row's first real (non-padding) token
    # (B, H, S, D) the stored keys, post-RoPE as stored: rotated at their original positions, or, with
    # rolling positions, re-rotated to their rank in the cache
    keys: torch.Tensor


# a new policy is one file, attnlab/kv/policy_NAME.py, registered by its decorator
POLICIES: Registry[type[KVPolicy]] = Registry("KV policy", discover=files("attnlab.kv", "policy_"))


def register(cls: type[KVPolicy]) -> type[KVPolicy]:
    """Class decorator: the policy becomes ``POLICIES[cls.name]``."""
    return POLICIES.add(cls.name, cls)


@dataclass(frozen=True)
class KVPolicy:
    """Base: ``budget`` tokens kept (None: keep everything)."""

    budget: int | float | None = None
    needs_scores = False  # True: the attention function accumulates attention into SlotState.score
    needs_budget = True  # False: the policy keeps everything
    scored = False  # True: some slots are kept by a per-(layer, KV head) score, so heads keep different tokens
    name = "full"
    about = ""  # one line of --help: what the policy keeps

    @classmethod
    def options(cls) -> tuple[str, ...]:
        """The options of ``make_policy`` this policy reads: its fields besides the budget."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.init and f.name != "budget")

    @classmethod
    def from_options(cls, budget: float | None, **options) -> KVPolicy:
        """The policy for ``make_policy``'s options; it takes those it has a field for, ignores the rest."""
        return cls(budget, **{k: v for k, v in options.items() if k in cls.options()})

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

    def n_recent(self, capacity: int) -> int:
        """How many of ``capacity`` slots are kept for recency alone (the recent window)."""
        return capacity

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        return s.pos.to(torch.float32)

    def received(self, probs: torch.Tensor) -> torch.Tensor:
        """For a policy with ``needs_scores``: what this step's attention adds to each slot's score. probs
        (B, H, g, q, S) -- the g query heads of each KV head, the step's q queries -> (B, H, S). H2O's:
        the attention each slot received, summed over the group's heads and the queries."""
        return received_attention(probs.flatten(2, 3))

    def accumulates(self) -> bool:
        """True: a slot's score is the sum of what it received (H2O); False: only this step's counts."""
        return True

    def score_slots(self) -> tuple[int, ...]:
        """A slot's score beyond (B, H, S): () for one number (H2O, TOVA), (w,) for the last w queries' attention
        kept apart (SnapKV's observation window)."""
        return ()

    def fold(self, score: torch.Tensor, probs: torch.Tensor) -> None:
        """Fold this step's attention, probs (B, H, g, q, S), into ``score`` (B, H, S, *score_slots()) in place:
        by default what :meth:`received` gives, added (H2O) or kept alone (TOVA), as :meth:`accumulates` says."""
        received = self.received(probs)  # (B, H, S)
        score.add_(received) if self.accumulates() else score.copy_(received)

    def for_layer(self, layer: int, n_layers: int) -> KVPolicy:
        """The policy layer ``layer`` of ``n_layers`` evicts by: this one, unless the policy spreads its budget
        over the layers (PyramidKV)."""
        return self

    def describe(self) -> str:
        return self.name if self.budget is None else f"{self.name}(budget={self.budget})"

    def label(self) -> str:
        """A table's short name, for a token budget: how the budget is split."""
        return f"{self.name} {self.budget}"


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
    name = "knorm"
    about = "Devoto et al.: the tokens whose keys have the smallest L2 norm, per KV head"

    def n_recent(self, capacity: int) -> int:
        return 0

    def priority(self, s: SlotState) -> torch.Tensor:
        at = torch.promote_types(s.keys.dtype, torch.float32)  # float32 at least (half keys); float64 stays
        return -torch.linalg.vector_norm(s.keys, dim=-1, dtype=at)  # (B, H, S): high norm goes first


def make_policy(name: str, budget: float | None = None, n_sink: int = 4,
                recent: int | None = None, **options) -> KVPolicy:
    """A policy by name, from the options it reads (``n_sink`` and ``recent`` are shared: a policy without them
    ignores them; any other option must be the policy's own). One-line errors for unknown names (with the
    closest), options the policy does not take, and impossible budgets."""
    cls = POLICIES.get(name)
    if unknown := [k for k in options if k not in cls.options()]:
        takes = f"its options: {', '.join(cls.options())}" if cls.options() else "it takes none"
        raise UsageError(f"policy {name!r} takes no option {unknown[0]!r} ({takes})")
    policy = cls.from_options(budget, n_sink=n_sink, recent=recent, **options)
    if not policy.needs_budget:
        return policy
    if budget is None:
        raise UsageError(f"policy {name!r} needs a budget, tokens or a share of those seen: --method {name}:budget=256 "
                         f"(or {name}:budget=0.2; the older --budget 256 with --policy)")
    check_number("budget", budget, where=f"budget {budget}")  # NaN passes every `<` below; capacity() needs a number
    if budget <= 0 or (isinstance(budget, float) and budget >= 1 and not budget.is_integer()):
        raise UsageError(f"budget {budget}: give a token count >= 1 or a fraction in (0, 1)")
    for key, value in (("n_sink", n_sink), ("recent", recent)):
        check_number(key, value, ">= 0")
    if isinstance(budget, float) and budget >= 1:
        policy = replace(policy, budget=int(budget))
    sinks, kept = getattr(policy, "n_sink", 0), getattr(policy, "recent", None)
    if isinstance(policy.budget, int) and policy.budget < policy.reserved() + 1:
        raise UsageError(f"budget {policy.budget} leaves no room beyond {sinks} sink(s)"
                         + (f" + {kept} recent" if kept else "") + f": use a budget >= {policy.reserved() + 1}")
    return policy
