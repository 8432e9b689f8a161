"""Attention statistics every part of attnlab measures with: entropy (sparsity) and sink share.

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
