"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), with filler between the pairs and the
queries so that distance is a knob: the task a model that *remembers* is trained on before it is streamed through
the KV-cache policies (what does each one forget, and at what distance?).

A sequence is BOS, ``pairs`` key-value pairs (distinct keys), ``gap`` filler tokens, then ``queries`` of the keys
again, each followed by its value::

    BOS  k1 v1  k2 v2 ... kP vP   f f f ... f   kq vq  kr vr ...
                                  '-- gap --'

Keys, values and filler come from disjoint ranges of the vocabulary (keys first, then values, then filler, then
BOS). The loss that counts is at the query keys: the next token is the value the key was paired with, which
only an attention to that pair can give. Pure torch: the data, the positions scored and each query's distance.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError


@dataclass(frozen=True)
class MQAR:
    n_keys: int = 64
    n_values: int = 64
    n_filler: int = 16
    pairs: int = 8
    queries: int = 4  # each asks for one of the pairs
    gap: int = 16  # filler tokens between the last pair and the first query
    # queries drawn with replacement (training: drawn without, a model scores 1/P + 1/(P-1) + ... by naming a
    # value not asked for yet, a shortcut that hides whether it recalls); False: distinct pairs (streaming: each
    # query's only earlier occurrence is its pair, never an earlier query of the same key)
    repeat: bool = True

    def __post_init__(self):
        if min(self.n_keys, self.n_values, self.n_filler, self.pairs, self.queries) < 1 or self.gap < 0:
            raise ConfigError("MQAR needs n_keys, n_values, n_filler, pairs and queries >= 1 and gap >= 0")
        if not self.repeat and self.queries > self.pairs:
            raise ConfigError(f"queries={self.queries} distinct pairs out of pairs={self.pairs}: give queries <= pairs "
                              "or repeat=True")
        if self.pairs > self.n_keys:
            raise ConfigError(f"pairs={self.pairs} distinct keys out of n_keys={self.n_keys}: give pairs <= n_keys")

    @property
    def bos(self) -> int:
        return self.n_keys + self.n_values + self.n_filler

    @property
    def vocab_size(self) -> int:
        return self.bos + 1

    @property
    def length(self) -> int:
        return 1 + 2 * self.pairs + self.gap + 2 * self.queries


def sample(task: MQAR, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x (B, L) long, scored (B, L) bool: the query keys, whose next token is their value; distance (B, L) long:
    at a query key, how many positions back its pair's key stands (0 elsewhere; with ``repeat``, an earlier query
    of the same key may stand nearer))."""
    p, q = task.pairs, task.queries
    keys = torch.rand(batch, task.n_keys, generator=generator).argsort(-1)[:, :p]  # (B, P) distinct
    values = task.n_keys + torch.randint(0, task.n_values, (batch, p), generator=generator)  # (B, P)
    if task.repeat:  # (B, Q) which pair each query asks for
        asked = torch.randint(0, p, (batch, q), generator=generator)
    else:
        asked = torch.rand(batch, p, generator=generator).argsort(-1)[:, :q]
    # drawn last: the same seed gives the same pairs and queries at every gap
    filler = task.n_keys + task.n_values + torch.randint(0, task.n_filler, (batch, task.gap), generator=generator)
    qk, qv = keys.gather(1, asked), values.gather(1, asked)  # (B, Q)
    bos = torch.full((batch, 1), task.bos)
    x = torch.cat([bos, torch.stack([keys, values], -1).flatten(1), filler, torch.stack([qk, qv], -1).flatten(1)], 1)
    scored = torch.zeros_like(x, dtype=torch.bool)
    first_query = 1 + 2 * p + task.gap
    at = first_query + 2 * torch.arange(q)  # (Q,) positions of the query keys
    scored[:, at] = True
    distance = torch.zeros_like(x)
    distance[:, at] = at - (1 + 2 * asked)  # the pair's key sits at 1 + 2 * its index
    return x, scored, distance
