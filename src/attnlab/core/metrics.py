"""Attention statistics every part of attnlab measures with: entropy (sparsity) and sink share; the
running residual-stream cosine across layers (``CosineSums``, shared by sparsity and probes).

H(a) = -Σ_j a_j log(a_j + eps) over the last axis. ``eps`` (1e-8, as in the JoMA authors'
real-text code) keeps exact zeros, e.g. causally masked entries, at zero contribution.
Uniform attention over n entries gives log n (2.303 for n = 10); one-hot gives 0.

The sink share of a row is its weight on key 0, the first token: the "attention sink" that
StreamingLLM keeps. Causal attention on a uniform row of length i gives 1/i; a sink row gives 1.
Gu et al.'s sink rate (ICLR 2025) counts heads instead: importance_k = mean over queries i >= k of
a[i, k]; Sink_k^eps = the share of (layer, head) pairs with importance_k > eps (0.3).
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


def sink_importance(a: torch.Tensor, k_max: int = 10) -> torch.Tensor:
    """a: (B, H, T, T) causal maps -> (H, k_max): importance_k, the mean over batch and queries i >= k of
    a[i, k], for k = 0 .. k_max-1 (Gu et al.)."""
    k = min(k_max, a.shape[-1])
    cols = a[..., :k].float()  # (B, H, T, k)
    seen = torch.arange(a.shape[-2], device=a.device)[:, None] >= torch.arange(k, device=a.device)  # (T, k): i >= k
    return (cols * seen).sum((0, 2)) / (seen.sum(0) * a.shape[0])  # (H, k)


def sink_rate(maps: list[torch.Tensor], eps: float = 0.3, k_max: int = 10) -> list[float]:
    """Sink_k^eps for k = 0 .. k_max-1 over all layers' heads: maps [(B, H, T, T)] per layer."""
    imp = torch.cat([sink_importance(a, k_max) for a in maps])  # (L*H, k)
    return (imp > eps).float().mean(0).tolist()


def position_norm_ratio(h: torch.Tensor, others: str = "mean") -> torch.Tensor:
    """h: (B, T, d) hidden states -> the norm at position 0 over the mean (or ``others="median"``) norm at
    positions 1.., averaged over the batch: about 1 without a massive activation on the first token, >> 1 with one."""
    norms = h.float().norm(dim=-1)  # (B, T)
    rest = norms[:, 1:].median(-1).values if others == "median" else norms[:, 1:].mean(-1)
    return (norms[:, 0] / rest).mean()


def received_attention(probs: torch.Tensor) -> torch.Tensor:
    """probs: (..., q, S) attention rows -> (..., S): the attention each key receives, summed over the q
    query rows. H2O's accumulated attention: the KV cache's H2O scores and the heavy-hitter probe both
    add these column sums up, step by step or chunk by chunk."""
    return probs.sum(dim=-2)


def follow(t: torch.Tensor, *sums: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Running sums ``sums`` on the device of ``t``, the tensor they are about to accumulate: moved there the
    first time they see one from elsewhere (a GPU model's), a no-op after. Why: sums made on the CPU and fed
    CUDA tensors stopped every probe on an H100; kept where their input lives they follow it by construction.
    Readouts bring them back with ``.cpu()``."""
    return tuple(s if s.device == t.device else s.to(t.device) for s in sums)


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
        self.sums, self.counts = follow(cos, self.sums, self.counts)
        self.sums[layer] += cos.sum()
        self.counts[layer] += cos.numel()

    def mean(self) -> torch.Tensor:
        """(n_layers,) the mean cosine of each layer over every pair added (NaN where none)."""
        return (self.sums / self.counts).float().cpu()
