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

(those six in ``policy_classic.py``; TOVA, SnapKV, KeyDiff, PyramidKV and Ada-KV a file each beside it).

``budget`` is a token count, or a fraction in (0, 1) of the tokens seen so far (H2O's "20%").
Selection is per KV head: each head keeps its own tokens; the stored tensors all have the same
length, so they stay one (B, H_kv, S, D) tensor.

The registry ``POLICIES`` maps each name to its class, and everything that names policies reads it
(``attnlab stream --policy``, the experiments' configs, the tests). A new policy is one file,
``kv/policy_NAME.py``, holding a class decorated with ``@register``, plus its test: its ``priority``,
its ``name``, and its options as dataclass fields (``make_policy`` hands each policy the options it has
fields for; ``from_options`` is the seam for one that builds itself differently).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from functools import cached_property

import torch

from attnlab.core.errors import UsageError, check_number
from attnlab.core.metrics import received_attention
from attnlab.core.registry import Registry, files
from attnlab.experiments.command import option

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
    reads_keys = False  # True: priority reads the stored keys (so rolling positions must have rotated them)
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

    def shares_budget(self) -> bool:
        """True: a layer's heads share its budget (:meth:`allocate`), so heads keep different counts."""
        return False

    def allocate(self, priority: torch.Tensor, keep: int) -> torch.Tensor:
        """For a policy that :meth:`shares_budget`: which slots stay visible when ``keep`` a head are kept on
        average, priority (B, H, S) -> (B, H, S) bool, ``keep * H`` per row (Ada-KV). A head's slots past its
        share stay stored beside them, masked, until they are evicted."""
        raise NotImplementedError

    def steady_step(self) -> str | None:
        """Why one static graph cannot hold this policy's steady decode step (attnlab.kv.steady: once the cache is
        full, one slot evicted a step and the new token written there), or None where it can."""
        if self.capacity(1) is None:
            return "never evicts (the full cache's compiled decode is attnlab.models.compiled's)"
        if isinstance(self.budget, float):
            return "keeps a share of the stream, which grows with it, where a compiled steady step needs a token budget"
        if self.shares_budget():
            return "shares a layer's budget over its heads, whose masked slots a compiled steady step does not keep"
        return None

    def for_layer(self, layer: int, n_layers: int) -> KVPolicy:
        """The policy layer ``layer`` of ``n_layers`` evicts by: this one, unless the policy spreads its budget
        over the layers (PyramidKV)."""
        return self

    def describe(self) -> str:
        return self.name if self.budget is None else f"{self.name}(budget={self.budget})"

    def label(self) -> str:
        """A table's short name, for a token budget: how the budget is split."""
        return f"{self.name} {self.budget}"


class Delegating(KVPolicy):
    """A policy that is another one, ``inner``, in everything it scores: its priorities, how it folds attention
    into the scores, the slots it protects, how a layer's heads share its budget. A subclass changes only how much
    is kept, and when (:class:`OverScorer` here; ``leaderboard.regimes.Once``). No fields: each subclass gives
    ``inner`` its own way."""

    inner: KVPolicy

    @property
    def needs_scores(self) -> bool:
        return self.inner.needs_scores

    @property
    def scored(self) -> bool:
        return self.inner.scored

    @property
    def reads_keys(self) -> bool:
        return self.inner.reads_keys

    def reserved(self) -> int:
        return self.inner.reserved()

    def n_recent(self, capacity: int) -> int:
        return self.inner.n_recent(capacity)

    def score_slots(self) -> tuple[int, ...]:
        return self.inner.score_slots()

    def fold(self, score: torch.Tensor, probs: torch.Tensor) -> None:
        self.inner.fold(score, probs)

    def shares_budget(self) -> bool:
        return self.inner.shares_budget()

    def allocate(self, priority: torch.Tensor, keep: int) -> torch.Tensor:
        return self.inner.allocate(priority, keep)

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        return self.inner.priority(s)


@dataclass(frozen=True)
class OverScorer(Delegating):
    """A policy that shares a budget out (over the layers: PyramidKV; over the heads: Ada-KV) and lets another
    registered policy, ``scorer``, choose the tokens: the scores, their folding and the slots it protects are
    the scorer's at the budget."""

    scorer: str = option("snapkv", "the policy whose scores choose the tokens", choices=lambda: POLICIES.names())

    def __post_init__(self):
        if self.scorer == self.name or not POLICIES.get(self.scorer).needs_budget:
            raise UsageError(f"{self.name} scorer={self.scorer}: give a policy that evicts by a score, e.g. snapkv, "
                             "h2o, tova, keydiff")

    @cached_property
    def inner(self) -> KVPolicy:
        """The scorer at the budget, made once: every eviction asks it for priorities."""
        return self.scorer_at(self.budget)

    def scorer_at(self, budget: float | None) -> KVPolicy:
        return make_policy(self.scorer, budget)


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


# the classic six, registered as this module loads so that every list names them first (the registry then
# finds the newer policies, a file each)
from attnlab.kv import policy_classic  # noqa: E402,F401
