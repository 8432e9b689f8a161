"""Attention statistics every part of attnlab measures with: entropy (sparsity) and sink share; the
running residual-stream cosine across layers (``CosineSums``, shared by sparsity and probes).

H(a) = -Σ_j a_j log(a_j + eps) over the last axis. ``eps`` (1e-8, as in the JoMA authors'
real-text code) keeps exact zeros, e.g. causally masked entries, at zero contribution.
Uniform attention over n entries gives log n (2.303 for n = 10); one-hot gives 0.

The sink share of a row is its weight on key 0, the first token: the "attention sink" that
StreamingLLM keeps. Causal attention on a uniform row of length i gives 1/i; a sink row gives 1.
"""
from __future__ import annotations

import torch

EPS = 1e-8


def attention_entropy(a: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """a: (..., n) rows summing to 1 -> (...,) entropies in nats."""
    return -(a * (a + eps).log()).sum(-1)


def sink_share(a: torch.Tensor) -> torch.Tensor:
    """a: (..., n) rows summing to 1 -> (...,) share of each row on the first key (token 0)."""
    return a[..., 0]


def received_attention(probs: torch.Tensor) -> torch.Tensor:
    """probs: (..., q, S) attention rows -> (..., S): the attention each key receives, summed over the q
    query rows. H2O's accumulated attention: the KV cache's H2O scores and the heavy-hitter probe both
    add these column sums up, step by step or chunk by chunk."""
    return probs.sum(dim=-2)


# --------------------------------------------------------------------------- residual-stream cosine (P3)
class CosineSums:
    """Running mean cosine similarity between paired rows, per layer: Deja Vu's "slowly changing
    embeddings" (cos(resid_pre_i, resid_post_i) over tokens), added up one window or chunk at a time so
    memory does not grow with the text. Sums in float64; ``mean()`` is sums / counts as float32."""

    def __init__(self, n_layers: int):
        self.n = n_layers
        self.sums = torch.zeros(n_layers, dtype=torch.float64)
        self.counts = torch.zeros(n_layers, dtype=torch.float64)

    def add(self, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """x, y: (..., d) paired vectors (e.g. one window's resid_pre and resid_post of ``layer``)."""
        cos = torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1)  # (...,)
        self.sums[layer] += cos.sum()
        self.counts[layer] += cos.numel()

    def mean(self) -> torch.Tensor:
        """(n_layers,) the mean cosine of each layer over every pair added (NaN where none)."""
        return (self.sums / self.counts).float()
