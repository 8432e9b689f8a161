"""The 1-layer attention models of Scan&Snap (THEORY.md §1.2).

Reparameterised model (the authors' ``Model2``): attention logits Z (M x M) and decoder
Y (M x M) are free parameters. For a sequence whose query token is m::

    b_t   = softmax_t(z_{m, x_t})          over the T-1 contextual positions only
    u     = Σ_t b_t e_{x_t}  (+ e_m if residual)
    u     = u / ||u||_2                     if normalize (the LayerNorm stand-in)
    logits = Y u

With no positional encoding, Σ_t b_t e_{x_t} depends on the sequence only through the
count vector x of its contextual tokens: it equals softmax_l(z_{ml} + ln x_l) over token
*types*. :func:`yz_logits` uses that bag form, and works on parameters with any leading
"run" dimensions (one set of Y, Z per config and seed), which is what makes whole sweeps
one tensor program. :func:`yz_logits_tokens` is the positional form, kept for checking.

Original parameterisation (the seed's first slide): token embeddings U (M x d) and
W_Q, W_K, W_V (d x d); then Y = U W_Vᵀ Uᵀ and Z = U W_Q W_Kᵀ Uᵀ.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.errors import ConfigError

INITS = ("default", "zero")


def init_yz(M: int, init: str, generator: torch.Generator | None = None, dtype=torch.float32):
    """Y, Z as the authors initialise them: zero, or PyTorch's default ``nn.Linear(M, M)``
    init U(±1/√M) ("zero_init=false"), drawn Y first then Z. Returns (Y, Z), each (M, M)."""
    if init not in INITS:
        raise ConfigError(f"unknown init {init!r}: use one of {', '.join(INITS)}")
    if init == "zero":
        return torch.zeros(M, M, dtype=dtype), torch.zeros(M, M, dtype=dtype)
    bound = 1.0 / math.sqrt(M)
    Y = torch.empty(M, M, dtype=dtype).uniform_(-bound, bound, generator=generator)
    Z = torch.empty(M, M, dtype=dtype).uniform_(-bound, bound, generator=generator)
    return Y, Z


def bag_attention(Z: torch.Tensor, counts: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """Attention mass per token type, Σ_t b_t e_{x_t}.

    Z: (..., M, M); counts: (..., B, M) contextual-token counts; query: (..., B) long.
    Leading dims broadcast. Returns (..., B, M), rows summing to 1.
    """
    M = Z.shape[-1]
    lead = torch.broadcast_shapes(Z.shape[:-2], counts.shape[:-2], query.shape[:-1])
    B = query.shape[-1]
    idx = query[..., :, None].expand(*lead, B, M)
    z_q = Z.expand(*lead, M, M).gather(-2, idx)  # (..., B, M): z_{m, l} for each sample's query m
    return torch.softmax(z_q + counts.log(), dim=-1)  # ln 0 = -inf drops absent tokens


def attention_output(
    a: torch.Tensor, query: torch.Tensor, normalize: bool, residual: bool
) -> torch.Tensor:
    """u from the attention mass a: (..., B, M); adds e_query if residual, ℓ2-normalises if asked."""
    if residual:
        a = a + F.one_hot(query, a.shape[-1]).to(a.dtype)
    if normalize:
        a = a / a.norm(dim=-1, keepdim=True)
    return a


def yz_logits(
    Y: torch.Tensor,
    Z: torch.Tensor,
    counts: torch.Tensor,
    query: torch.Tensor,
    normalize: bool = True,
    residual: bool = False,
) -> torch.Tensor:
    """Logits of the reparameterised model from count vectors.

    Y, Z: (..., M, M); counts: (..., B, M); query: (..., B). Returns (..., B, M).
    """
    u = attention_output(bag_attention(Z, counts, query), query, normalize, residual)  # (..., B, M)
    return u @ Y.transpose(-1, -2)  # (..., B, M): logits = Y u


def yz_logits_tokens(
    Y: torch.Tensor, Z: torch.Tensor, x: torch.Tensor, normalize: bool = True, residual: bool = False
) -> torch.Tensor:
    """Positional form, as the authors' ``Model2.forward``: x (B, T) token ids, Y, Z (M, M)."""
    M = Y.shape[-1]
    ctx, query = x[:, :-1], x[:, -1]
    b = torch.softmax(Z[query[:, None], ctx], dim=-1)  # (B, T-1): b_t = softmax_t z_{m, x_t}
    a = torch.zeros(x.shape[0], M, dtype=Y.dtype).scatter_add_(1, ctx, b.to(Y.dtype))  # (B, M)
    return attention_output(a, query, normalize, residual) @ Y.T


def cross_entropy(logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the sample dim. logits (..., B, M); label (..., B). Returns (...)."""
    lead = logits.shape[:-1]
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, label.expand(lead)[..., None]).squeeze(-1).mean(-1)


class YZModel(nn.Module):
    """The reparameterised model as a module, with Y and Z of shape (*runs, M, M)."""

    def __init__(
        self,
        M: int,
        normalize: bool = True,
        residual: bool = False,
        init: str = "default",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        Y, Z = init_yz(M, init, generator)
        self.Y, self.Z = nn.Parameter(Y), nn.Parameter(Z)
        self.normalize, self.residual = normalize, residual

    def forward(self, counts: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return yz_logits(self.Y, self.Z, counts, query, self.normalize, self.residual)

    def forward_tokens(self, x: torch.Tensor) -> torch.Tensor:
        return yz_logits_tokens(self.Y, self.Z, x, self.normalize, self.residual)


NORMS = ("layernorm", "l2", "none")


class OriginalAttentionModel(nn.Module):
    """The seed's starting point: embeddings U, W_Q, W_K, W_V, then a norm, tied output.

    For a sequence x (B, T) with query token m = x_T::

        z_t    = (U_m W_Q) · (U_{x_t} W_K)       t < T (no positional encoding, no 1/√d)
        h      = norm(Σ_t softmax(z)_t U_{x_t})   (B, d): the slide's U^T LN(X^T b_T)
        logits = (h W_V) Uᵀ                       (B, M)

    With norm="none" (or "l2" and U with orthonormal rows, so ||U^T a|| = ||a||) this is
    exactly the Y/Z model with
    Y = U W_Vᵀ Uᵀ and Z = U W_Q W_Kᵀ Uᵀ (see :meth:`reparameterised`). norm="layernorm" is
    LayerNorm over d without affine, as on the slide.
    """

    def __init__(self, M: int, d: int, norm: str = "layernorm", generator: torch.Generator | None = None):
        super().__init__()
        if norm not in NORMS:
            raise ConfigError(f"unknown norm {norm!r}: use one of {', '.join(NORMS)}")
        if M < 1 or d < 1:
            raise ConfigError(f"M={M}, d={d}: both must be >= 1")
        self.U = nn.Parameter(torch.randn(M, d, generator=generator) / math.sqrt(d))
        self.W_Q, self.W_K, self.W_V = (
            nn.Parameter(torch.randn(d, d, generator=generator) / math.sqrt(d)) for _ in range(3)
        )
        self.norm = norm

    def forward_tokens(self, x: torch.Tensor) -> torch.Tensor:
        E = self.U[x]  # (B, T, d)
        q = E[:, -1] @ self.W_Q  # (B, d)
        k = E[:, :-1] @ self.W_K  # (B, T-1, d)
        b = torch.softmax(torch.einsum("bd,btd->bt", q, k), dim=-1)  # (B, T-1)
        h = torch.einsum("bt,btd->bd", b, E[:, :-1])  # (B, d)
        if self.norm == "layernorm":
            h = F.layer_norm(h, h.shape[-1:])
        elif self.norm == "l2":
            h = h / h.norm(dim=-1, keepdim=True)
        return h @ self.W_V @ self.U.T  # (B, M)

    @torch.no_grad()
    def reparameterised(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(Y, Z) = (U W_Vᵀ Uᵀ, U W_Q W_Kᵀ Uᵀ), each (M, M)."""
        U = self.U
        return U @ self.W_V.T @ U.T, U @ self.W_Q @ self.W_K.T @ U.T
