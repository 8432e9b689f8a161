"""Weight-only int4, one bf16 scale and zero per group of 32 input units, into PyTorch's CPU int4 kernel.

    w4 = quantize(w)          # w (out, in) float -> Int4Weight: 4 bits a weight, packed two to a byte
    y = w4.linear(x, bias)    # x (..., in) -> (..., out), ~ F.linear(x, w4.dequantize(), bias)

Asymmetric groups, as the kernel reads them (the tinygemm convention, torchao's CPU int4 too): a weight is
``(q - 8) * scale + zero`` with q in 0..15, ``zero = min + 8 * scale`` and ``scale = (max - min) / 15`` over its
group. The kernel (``torch._weight_int4pack_mm_for_cpu``, measured against int8 in ``benchmarks/bench_int8.py``
as torchao's int4: as fast as int8 on SmolLM2's layer projections, faster on its LM head) wants the groups
whole (in padded to a multiple of 32) and out a multiple of 16 (padded with zero rows, sliced off), with bf16
activations, scales and zeros; its packing interleaves rows, so a kept neuron's row cannot be cut from it.
The sparse MLP's gathers (``rows``, ``columns``) therefore read a one-byte-a-weight copy of q made on first use
and dequantize only the units they keep: correct, composable, and no faster than the dense int4 product.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.quant.schemes import SCHEMES, Scheme

GROUP = 32  # input units per scale and zero
ROWS = 16  # the packing's block of output units
ACT = torch.bfloat16  # the kernel's activations, scales and zeros


def _pad(t: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    extra = -t.shape[dim] % multiple
    if extra == 0:
        return t
    pad = [0, 0] * (t.dim() - 1 - dim % t.dim()) + [0, extra]
    return F.pad(t, pad)


class Int4Weight:
    """packed: the kernel's int4 layout of q (out', in'/2) uint8; scale_zero (in'/32, out', 2) bf16; n_out, n_in:
    the weight's true shape (out' and in' padded up as the kernel needs)."""

    def __init__(self, packed: torch.Tensor, scale_zero: torch.Tensor, n_out: int, n_in: int):
        self.packed, self.scale_zero, self.n_out, self.n_in = packed, scale_zero, n_out, n_in
        self._q: torch.Tensor | None = None  # (out, in) uint8, 0..15: the gathers' copy, made on first use

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scale_zero))

    def _unpacked(self) -> torch.Tensor:
        """q (out, in) uint8, 0..15, read back through the kernel (its packing interleaves rows: its own layout).
        The kernel applied to the identity gives each weight to bf16's 8 bits, well within half a level of
        its q (a level is a 15th of its group's range), so rounding recovers q exactly."""
        if self._q is None:
            eye = torch.eye(self.packed.shape[1] * 2, dtype=ACT)  # (in', in')
            w_t = torch._weight_int4pack_mm_for_cpu(eye, self.packed, GROUP, self.scale_zero)  # (in', out')
            s, z = self._scale_zero()
            self._q = torch.round((w_t[:self.n_in, :self.n_out].T.float() - z) / s + 8).clamp_(0, 15).to(torch.uint8)
        return self._q

    def _scale_zero(self, rows: torch.Tensor | None = None, cols: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, zero) of each weight, (out, in) float32 each; with ``rows`` (u,) only those output units',
        (u, in), with ``cols`` (u,) only those input units', (out, u): the groups picked before they are expanded,
        so a gather pays for its own units, not the whole weight."""
        sz = self.scale_zero[:, :self.n_out].float()  # (in'/32, out, 2)
        if rows is not None:
            sz = sz.index_select(1, rows)  # (in'/32, u, 2)
        units = torch.arange(self.n_in) if cols is None else cols
        sz = sz.index_select(0, units // GROUP)  # (in or u, out or u, 2): each input unit's group
        return sz[..., 0].T, sz[..., 1].T

    def dequantize(self) -> torch.Tensor:
        """(out, in) float32: the weight the int4 product stands for, (q - 8) * scale + zero."""
        s, z = self._scale_zero()
        return (self._unpacked().float() - 8) * s + z

    # the weight layout protocol (attnlab.core.weights)
    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        flat = _pad(x.reshape(-1, x.shape[-1]), 1, GROUP).to(ACT).contiguous()  # (M, in')
        if x.device.type != "cpu":  # the kernel is PyTorch's CPU one: elsewhere the dequantized product
            y = F.linear(x.reshape(-1, x.shape[-1]), self.dequantize().to(x))
        else:
            y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scale_zero)[:, :self.n_out]
        y = y.to(x.dtype).view(*x.shape[:-1], self.n_out)  # (..., out)
        return y if bias is None else y + bias

    def rows(self, rows: torch.Tensor, scratch=None) -> "_Dense":
        """Output units ``rows`` (u,), dequantized from the gathers' copy of q."""
        s, z = self._scale_zero(rows=rows)  # (u, in) each
        q = self._unpacked().index_select(0, rows).float()  # (u, in)
        return _Dense((q - 8) * s + z)

    def columns(self) -> "_Columns":
        return _Columns(self)


class _Dense:
    """A few dequantized rows (u, in): what ``Int4Weight.rows`` gives the gathers."""

    def __init__(self, w: torch.Tensor):
        self.w = w

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return _as_kernel(x, lambda a: F.linear(a, self.w), bias)


def _as_kernel(x: torch.Tensor, product, bias: torch.Tensor | None) -> torch.Tensor:
    """``product`` of x rounded as the kernel rounds: bf16 activations in, float32 sums, bf16 out (so a gathered
    piece equals the whole int4 product's piece, and a threshold downstream sees the same numbers)."""
    y = product(x.to(ACT).float()).to(ACT).to(x.dtype)
    return y if bias is None else y + bias


class _Columns:
    """The weight read by input units: the kept units' columns dequantized per call (v_u @ W[:, rows]^T)."""

    def __init__(self, w: Int4Weight):
        self.w = w

    def dense(self, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self.w.linear(v, bias)

    def rows_product(self, v_u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """v_u (N, u) holding input units ``rows`` (u,) -> (N, out)."""
        s, z = self.w._scale_zero(cols=rows)  # (out, u) each
        q = self.w._unpacked().index_select(1, rows).float()  # (out, u)
        cols = (q - 8) * s + z
        return _as_kernel(v_u, lambda a: a @ cols.T, None)  # (N, u) @ (u, out)


def quantize(w: torch.Tensor) -> Int4Weight:
    """w (out, in) float -> its int4 weight, groups of 32 input units. Scale and zero are rounded to bf16 first and
    q computed from the rounded pair, so ``(q - 8) * scale + zero`` is what the kernel multiplies."""
    n_out, n_in = w.shape
    g = _pad(_pad(w.detach().float(), 1, GROUP), 0, ROWS)  # (out', in') zeros padded
    groups = g.view(g.shape[0], -1, GROUP)  # (out', in'/32, 32)
    lo, hi = groups.amin(-1), groups.amax(-1)  # (out', in'/32)
    scale = ((hi - lo).clamp_min(1e-12) / 15).to(ACT).float()
    zero = (lo + 8 * scale).to(ACT).float()
    q = torch.round((groups - zero[..., None]) / scale[..., None] + 8).clamp_(0, 15)  # (out', in'/32, 32)
    packed = torch._convert_weight_to_int4pack_for_cpu(q.view(g.shape).to(torch.int32).contiguous(), 1)
    scale_zero = torch.stack([scale, zero], -1).transpose(0, 1).to(ACT).contiguous()  # (in'/32, out', 2)
    return Int4Weight(packed, scale_zero, n_out, n_in)


SCHEMES.add("int4", Scheme(quantize, "weight-only int4, one scale and zero per group of 32 inputs"))
