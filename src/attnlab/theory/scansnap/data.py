"""The Scan&Snap sequence-class distribution (THEORY.md §1.1, the authors' ``Dataset2``).

A *sequence class* n has a query ("last") token m = ψ(n) and a next token to predict.
Its contextual tokens are drawn i.i.d. from P(l|n), which mixes

* **common** tokens, shared by every class (weight ``common_weight`` each),
* **per-query common** tokens, shared by the classes of one query (same weight),
* **distinct** tokens, owned by class n alone (weights ``linspace(min, max)``).

Token ids are laid out as in the authors' code::

    [commons | per-query commons | distincts of class 0, 1, ... | queries | next tokens]

Worked example (the defaults, ``num_last=1``): K = 2 classes share query token 30;
class 0 draws from tokens 0-9 (P = 1/15.5 each) and 10-19 (P = 0.1/15.5 ... 1/15.5),
class 1 from 0-9 and 20-29; its label is next token 31 (class 0) or 32 (class 1);
M = 33.

Because the model has no positional encoding, a sequence is a bag of tokens: the
multinomial count vector of the T-1 contextual tokens carries everything the model
sees. :meth:`SeqClassDistribution.sample_counts` draws that vector directly (by
conditional binomials over each class's support), which is equal in distribution to
counting the tokens of :meth:`SeqClassDistribution.sample_sequences` and far cheaper.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError


@dataclass(frozen=True)
class SeqClassConfig:
    """Shape of the sequence-class distribution; field names follow the authors' flags."""

    num_last: int = 1  # query tokens
    num_next_per_last: int = 2  # classes per query token (K = num_last * num_next_per_last)
    num_common: int = 10  # common tokens shared by all classes
    num_common_per_last: int = 0  # common tokens shared by the classes of one query
    num_distinct_per_next: int = 10  # distinct tokens owned by each class
    common_weight: float = 1.0  # unnormalised weight of each (per-query) common token
    distinct_weight_min: float = 0.1  # distinct weights: linspace(min, max, num_distinct)
    distinct_weight_max: float = 1.0
    T: int = 128  # sequence length: T-1 contextual tokens, then the query token

    def __post_init__(self) -> None:
        if self.num_last < 1 or self.num_next_per_last < 1:
            raise ConfigError(
                f"zero classes (num_last={self.num_last}, num_next_per_last={self.num_next_per_last}): "
                "set both to at least 1"
            )
        for name in ("num_common", "num_common_per_last", "num_distinct_per_next"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} is negative: use 0 or more")
        if self.num_common + self.num_common_per_last + self.num_distinct_per_next == 0:
            raise ConfigError("classes have no contextual tokens: set num_common or num_distinct_per_next >= 1")
        if self.T < 2:
            raise ConfigError(f"T={self.T} leaves no contextual token: use T >= 2")
        if min(self.common_weight, self.distinct_weight_min, self.distinct_weight_max) < 0:
            raise ConfigError("token weights must be non-negative: fix common_weight / distinct_weight_min/max")
        if self.distinct_weight_max < self.distinct_weight_min:
            raise ConfigError("distinct_weight_max < distinct_weight_min: swap them")


class SeqClassDistribution:
    """P(l|n), ψ and the token layout for a :class:`SeqClassConfig`.

    Attributes (all tensors on CPU, float64 where probabilities):
        K, M: number of classes and vocabulary size.
        P: (K, M) — P(l|n) over the whole vocabulary (zero outside the support).
        query: (K,) — ψ(n), the query token id of each class.
        label: (K,) — the next-token id of each class (the cross-entropy target).
        support: (K, S) — token ids each class can draw; ``support_P`` (K, S) their P.
        common: (num_common,) ids; distinct: (K, num_distinct_per_next) ids.
        query_ids: (num_last,) the distinct query tokens.
    """

    def __init__(self, cfg: SeqClassConfig):
        self.cfg = cfg
        c = cfg
        self.K = c.num_last * c.num_next_per_last
        per_last_offset = c.num_common
        distinct_offset = per_last_offset + c.num_common_per_last * c.num_last
        query_offset = distinct_offset + c.num_distinct_per_next * self.K
        next_offset = query_offset + c.num_last
        self.M = next_offset + self.K

        self.common = torch.arange(c.num_common)
        self.distinct = distinct_offset + torch.arange(self.K * c.num_distinct_per_next).view(
            self.K, c.num_distinct_per_next
        )
        self.query_ids = query_offset + torch.arange(c.num_last)
        n = torch.arange(self.K)
        self.query = self.query_ids[n // c.num_next_per_last]  # ψ(n)
        self.label = next_offset + n
        per_last = per_last_offset + (n // c.num_next_per_last)[:, None] * c.num_common_per_last + torch.arange(
            c.num_common_per_last
        )  # (K, num_common_per_last)
        self.support = torch.cat([self.common.expand(self.K, -1), per_last, self.distinct], dim=1)  # (K, S)

        w_common = torch.full((c.num_common + c.num_common_per_last,), c.common_weight, dtype=torch.float64)
        w_distinct = torch.linspace(
            c.distinct_weight_min, c.distinct_weight_max, c.num_distinct_per_next, dtype=torch.float64
        )
        w = torch.cat([w_common, w_distinct])
        if w.sum() <= 0:
            raise ConfigError("all token weights are zero: raise common_weight or distinct_weight_max")
        self.support_P = (w / w.sum()).expand(self.K, -1).contiguous()  # (K, S)
        self.P = torch.zeros(self.K, self.M, dtype=torch.float64).scatter_(1, self.support, self.support_P)

    @property
    def T(self) -> int:
        return self.cfg.T

    def classes_of_query(self) -> list[torch.Tensor]:
        """ψ⁻¹(m) for each query token, in ``query_ids`` order."""
        return [torch.nonzero(self.query == m).flatten() for m in self.query_ids]

    # --- samplers -------------------------------------------------------------------
    def sample_classes(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n ~ uniform over the K classes. Returns (batch,) long."""
        return torch.randint(self.K, (batch,), generator=generator)

    def sample_sequences(
        self, batch: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Explicit token sequences, as the authors' ``Dataset2.generate``.

        Returns x: (batch, T) long — T-1 contextual tokens then ψ(n); y: (batch,) next-token ids.
        """
        n = self.sample_classes(batch, generator)
        pos = torch.multinomial(self.support_P[n], self.T - 1, replacement=True, generator=generator)  # (B, T-1)
        x = torch.cat([self.support[n].gather(1, pos), self.query[n, None]], dim=1)  # (B, T)
        return x, self.label[n]

    def sample_counts(
        self, batch: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The multinomial count vector of the T-1 contextual tokens, without the sequence.

        Draws Multinomial(T-1, P(·|n)) by conditional binomials along the class support:
        x_j ~ Bin(N - Σ_{i<j} x_i, p_j / (1 - Σ_{i<j} p_i)). Equal in distribution to
        ``counts_of(sample_sequences(...))``; costs S binomial draws instead of T-1 categorical ones.

        Returns counts: (batch, M) float; query: (batch,) long; y: (batch,) long.
        """
        n = self.sample_classes(batch, generator)
        p = self.support_P[n]  # (B, S)
        remaining = torch.full((batch,), float(self.T - 1), dtype=torch.float64)
        mass_left = torch.ones(batch, dtype=torch.float64)
        cols = []
        for j in range(p.shape[1]):
            q = (p[:, j] / mass_left).clamp(0.0, 1.0)
            x_j = torch.binomial(remaining, q, generator=generator)
            cols.append(x_j)
            remaining = remaining - x_j
            mass_left = (mass_left - p[:, j]).clamp_min(1e-300)
        support_counts = torch.stack(cols, dim=1)  # (B, S)
        counts = torch.zeros(batch, self.M, dtype=torch.float64).scatter_add_(1, self.support[n], support_counts)
        return counts.float(), self.query[n], self.label[n]

    def counts_of(self, x: torch.Tensor) -> torch.Tensor:
        """Count vector of the contextual tokens of explicit sequences x: (B, T) -> (B, M) float."""
        ctx = x[:, :-1]
        return torch.zeros(x.shape[0], self.M).scatter_add_(1, ctx, torch.ones_like(ctx, dtype=torch.float32))
