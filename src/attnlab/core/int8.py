"""Weight-only int8: symmetric per-output-channel quantization and the kernel that reads it.

    w8 = quantize(w)            # w (out, in) float -> Int8Weight(q (out, in) int8, scale (out,) bf16)
    y = linear(x, w8, bias)     # x (..., in) -> (..., out), ~ F.linear(x, w8.dequantize(), bias)

Why int8 pays on a CPU: decode at batch 1 is weight-read bound, and an int8 weight is a quarter of fp32's
bytes. The kernel is PyTorch's ``torch._weight_int8pack_mm`` (x (M, K) @ q (N, K)^T * scale) fed bf16
activations and scales: its bf16 path is the vectorised one; with fp32 activations it takes a slow path
(``benchmarks/bench_int8.py`` measures both, torchao's int8 weight-only tensor, and the dequantized
product). The kernel reads K in blocks of 16 and reads past the end when K is not a multiple of 16
(measured here: a segmentation fault), so :func:`linear` pads such inputs with zeros (and their weights
once, at quantization). The result is rounded to bf16's 8 mantissa bits: the claims of
``attnlab reproduce quant-agreement`` say what that costs a real model.

Pure torch (no Hugging Face): the transform that swaps a model's projections is
:mod:`attnlab.quant.transform`; the sparse MLP reads an Int8Weight through the weight layout protocol
(:mod:`attnlab.core.weights`: ``linear``, ``rows``, ``columns``).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

BLOCK = 16  # the kernel's K granularity
ACT = torch.bfloat16  # the activations and scales the kernel's fast path takes


class Int8Weight(NamedTuple):
    """q (out, k) int8 with k = in padded up to a multiple of BLOCK (zeros); scale (out,) bf16, the kernel's
    own dtype (converting it every call would cost a small op per projection per step); n_in: in; smooth
    (in,) float32 or None: SmoothQuant's per-input-unit factor s, x W^T = (x / s)(W diag(s))^T -- q rounds
    W diag(s), and every product divides its input by s first (:mod:`attnlab.core.w8a8`)."""

    q: torch.Tensor
    scale: torch.Tensor
    n_in: int
    smooth: torch.Tensor | None = None

    def dequantize(self) -> torch.Tensor:
        """(out, in) float32: the weight the int8 product stands for."""
        w = self.q[:, :self.n_in].float() * self.scale.float()[:, None]
        return w if self.smooth is None else w / self.smooth

    @property
    def nbytes(self) -> int:
        extra = 0 if self.smooth is None else self.smooth.numel() * self.smooth.element_size()
        return self.q.numel() * self.q.element_size() + self.scale.numel() * self.scale.element_size() + extra

    def product(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """The kernel every product of this weight goes through (whole, gathered rows, kept columns)."""
        return matmul(x, q, scale)

    # the weight layout protocol (attnlab.core.weights): what the sparse MLP's gathers read
    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear(x, self, bias)

    def rows(self, rows: torch.Tensor, scratch=None) -> "Int8Weight":
        """Output units ``rows`` (u,): q's rows (into a scratch buffer, if lent) and their scales."""
        return gather_rows(self, rows, scratch.take(self.q, rows.numel()) if scratch is not None else None)

    def columns(self) -> "Int8Columns":
        return Int8Columns.of(self)


def _pad_to_block(t: torch.Tensor) -> torch.Tensor:
    """t (..., k) -> (..., k') zero-padded to the next multiple of BLOCK (t itself when k is one)."""
    extra = -t.shape[-1] % BLOCK
    return t if extra == 0 else F.pad(t, (0, extra))


def quantize(w: torch.Tensor, smooth: torch.Tensor | None = None) -> Int8Weight:
    """w (out, in) float -> its int8 weight: each output channel scaled by max|w_row| / 127 (round to nearest).
    The scale is rounded *up* to bf16 before q is computed, so q * scale is exactly what the kernel multiplies
    and no |q| exceeds 127. ``smooth`` (in,): round W diag(smooth) instead (its products divide x by it)."""
    w = w.detach().float()
    if smooth is not None:
        smooth = smooth.detach().float().contiguous()
        w = w * smooth
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0  # (out,) an all-zero row: any scale, q = 0
    scale = (scale * (1 + 2 ** -7)).to(ACT)  # bf16 keeps 8 significant bits: nearest of this is >= scale
    q = torch.round(w / scale.float()[:, None]).clamp_(-127, 127).to(torch.int8)  # (out, in)
    return Int8Weight(_pad_to_block(q).contiguous(), scale.contiguous(), w.shape[1], smooth)


def matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (M, k) @ q (N, k)^T * scale (N,) bf16 -> (M, N) in x's dtype; k a multiple of BLOCK (the bf16 path)."""
    if x.device.type != "cpu":  # the fast kernel is PyTorch's CPU one: elsewhere the dequantized product
        return F.linear(x, q.to(x.dtype) * scale.to(x.dtype)[:, None])
    y = torch._weight_int8pack_mm(x.to(ACT).contiguous(), q, scale)  # (M, N) bf16
    return y.to(x.dtype)


def linear(x: torch.Tensor, w: Int8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) -> (..., out): F.linear with the int8 weight."""
    flat = _pad_to_block(_smoothed(x.reshape(-1, x.shape[-1]), w.smooth))  # (M, k)
    y = w.product(flat, w.q, w.scale).view(*x.shape[:-1], w.q.shape[0])  # (..., out)
    return y if bias is None else y + bias


def _smoothed(x: torch.Tensor, smooth: torch.Tensor | None) -> torch.Tensor:
    """x (M, u) / smooth (u,) in x's dtype: the input the smoothed weight multiplies (x itself unsmoothed)."""
    return x if smooth is None else (x / smooth).to(x.dtype)


def gather_rows(w: Int8Weight, rows: torch.Tensor, out: torch.Tensor | None = None) -> Int8Weight:
    """The int8 weight of output units ``rows`` (u,): q's rows (into ``out``, a (u, k) int8 buffer, if given)."""
    q = torch.index_select(w.q, 0, rows, out=out) if out is not None else w.q.index_select(0, rows)
    return w._replace(q=q, scale=w.scale.index_select(0, rows))  # its own kind (W8A8Weight stays one)


def columns_t(q_t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """q_t (in, out) int8, a transposed copy of a weight's q -> q[:, rows] as (out, u') contiguous, zero-padded
    to u' a multiple of BLOCK: the input units ``rows`` of the weight, read as contiguous rows of q_t (a kept
    neuron's column of W_down costs its own bytes, not a strided pass over every row)."""
    picked = q_t.index_select(0, rows)  # (u, out) int8
    return _pad_to_block(picked.T).contiguous()  # (out, u')


class Int8Columns(NamedTuple):
    """A weight read by input units: ``w`` its Int8Weight and ``q_t`` (in, out) int8, a transposed copy of w.q made
    once, so that input unit j's column is a contiguous row (W_down's kept neurons; TEAL's kept channels)."""

    w: Int8Weight
    q_t: torch.Tensor

    @classmethod
    def of(cls, w: Int8Weight) -> "Int8Columns":
        return cls(w, w.q[:, :w.n_in].T.contiguous())  # (in, out)

    def dense(self, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """v (N, in) -> (N, out): the whole product."""
        return self.w.linear(v, bias)

    def rows_product(self, v_u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """v_u (N, u) holding input units ``rows`` (u,) -> (N, out): only those units' columns read."""
        smooth = None if self.w.smooth is None else self.w.smooth[rows]
        v = _pad_to_block(_smoothed(v_u, smooth))
        return self.w.product(v, columns_t(self.q_t, rows), self.w.scale)
