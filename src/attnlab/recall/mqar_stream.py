"""Stream MQAR sequences through an evicting cache and read what it forgot.

A batch of MQAR sequences is fed one token at a time through a :class:`~attnlab.kv.cache.PolicyCache` (original
positions: the stream fits the trained length, so eviction is the only change); at each query key the model's
most likely next token is its answer, and each layer's stored stream indices say whether the queried pair's
value -- the slot an induction head reads the answer from -- was still there. The pair's attention mass, from a
full-cache forward, is what H2O ranks by: the attention each value token received from the tokens after it
until the first query, per layer (mean over heads).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import KVPolicy
from attnlab.models.causal_lm import CausalLM


@dataclass(frozen=True)
class Streamed:
    hit: torch.Tensor  # (B, Q) bool: the answer at the query was its pair's value
    kept: torch.Tensor  # (layers, B, Q) float: share of the layer's KV heads holding the pair's value at the query
    first: torch.Tensor  # (layers, B, L) float: share of the KV heads holding each position at the first query


def query_positions(scored: torch.Tensor) -> torch.Tensor:
    """(Q,) the query keys' positions (the same in every row of an MQAR batch)."""
    return scored[0].nonzero()[:, 0]


def value_positions(scored: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    """(B, Q) where each query's pair's value stands (one after its key)."""
    at = query_positions(scored)
    return at - distance[:, at] + 1


def _holding(pos: torch.Tensor, length: int) -> torch.Tensor:
    """pos (B, H, S) stored stream indices -> (B, L) share of the H heads holding each position."""
    held = torch.zeros(*pos.shape[:2], length + 1)  # (B, H, L+1); an index past the stream lands in the spare
    held.scatter_(2, pos.clamp(0, length), 1.0)
    return held[..., :length].mean(1)


@torch.no_grad()
def stream(model: CausalLM, x: torch.Tensor, scored: torch.Tensor, distance: torch.Tensor,
           policy: KVPolicy) -> Streamed:
    """x, scored, distance (B, L) from :func:`attnlab.recall.mqar.sample`, through ``policy`` token by token."""
    hf = model.hf
    b, length = x.shape
    at = query_positions(scored).tolist()
    values = value_positions(scored, distance)  # (B, Q)
    n_layers = hf.config.num_hidden_layers
    hit = torch.zeros(b, len(at), dtype=torch.bool)
    kept = torch.zeros(n_layers, b, len(at))
    first = torch.zeros(n_layers, b, length)
    with PolicyCache(hf, policy, positions="original") as cache:
        for t in range(at[-1] + 1):  # nothing after the last query is scored
            logits = hf(x[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1]  # (B, V)
            if t not in at:
                continue
            j = at.index(t)
            hit[:, j] = logits.argmax(-1) == x[:, t + 1]
            for i, layer in enumerate(cache.layers):
                held = _holding(layer.pos, length)  # (B, L)
                kept[i, :, j] = held.gather(1, values[:, j:j + 1])[:, 0]
                if j == 0:
                    first[i] = held
    return Streamed(hit, kept, first)


@torch.no_grad()
def value_mass(model: CausalLM, x: torch.Tensor, scored: torch.Tensor, pairs: int) -> torch.Tensor:
    """(layers, B, P) attention each pair's value token received, summed over the queries from itself up to the
    first query key (excluded), mean over heads: H2O's accumulated score for it under the full cache."""
    _, maps = model(x, attentions=True)  # layers x (B, H, L, L)
    until = int(query_positions(scored)[0])
    v = 2 + 2 * torch.arange(pairs)  # (P,) the values' positions: BOS, k1, v1, k2, v2, ...
    return torch.stack([a[:, :, :until, v].float().sum(2).mean(1) for a in maps])  # (layers, B, P)
