"""bf16 weights: each projection's weight rounded to bfloat16 and its product taken in bfloat16 (float32 sums,
the result rounded to bf16; a bias added after, in the model's dtype), everything between the products --
norms, rotary, attention, the KV cache, the residual stream -- left in the model's own dtype.

    wb = quantize(w)          # w (out, in) float -> BF16Weight(w (out, in) bf16): half fp32's bytes
    y = wb.linear(x, bias)    # x (..., in) -> (..., out) in x's dtype: F.linear on bf16 x and w

Why a scheme and not ``model.to(torch.bfloat16)``: as a method it is entered and left like any other (the
float weights come back bit for bit), composes with every KV policy, sparsity rule and RoPE scaling on every
command, and is counted by the bandwidth ledger at its own bytes; and it halves what decode reads -- the
weights -- while the attention and its cache keep the model's precision. Whether it is faster than fp32 is
the CPU's question: PyTorch's bf16 product is vectorised where the CPU has bf16 instructions (AVX512-BF16,
AMX) and converts each weight where it has none (``benchmarks/README.md`` has both CPUs' figures).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from attnlab.quant.schemes import SCHEMES, Scheme

ACT = torch.bfloat16  # the product's inputs and its rounded output


def _rounded(x: torch.Tensor, product, bias: torch.Tensor | None) -> torch.Tensor:
    """``product`` of x rounded to bf16, back in x's dtype, plus the bias there (the whole product and a
    gathered piece of it round alike, so gather equals mask)."""
    y = product(x.to(ACT)).to(x.dtype)
    return y if bias is None else y + bias


class BF16Weight(NamedTuple):
    """w (out, in) bf16: the weight rounded to nearest (bf16 keeps fp32's exponent and 8 significant bits)."""

    w: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.w.numel() * self.w.element_size()

    def dequantize(self) -> torch.Tensor:
        """(out, in) float32: the weight the product stands for (exactly: bf16 widens to fp32 without rounding)."""
        return self.w.float()

    # the weight layout protocol (attnlab.core.weights)
    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x (..., in) -> (..., out)."""
        return _rounded(x, lambda a: F.linear(a, self.w), bias)

    def rows(self, rows: torch.Tensor, scratch=None) -> "BF16Weight":
        """Output units ``rows`` (u,): w's rows (into a scratch buffer, if lent)."""
        if scratch is None:
            return BF16Weight(self.w.index_select(0, rows))
        return BF16Weight(torch.index_select(self.w, 0, rows, out=scratch.take(self.w, rows.numel())))

    def columns(self) -> "BF16Columns":
        return BF16Columns(self, self.w.T.contiguous())


class BF16Columns(NamedTuple):
    """The weight read by input units: ``w_t`` (in, out) bf16, a transposed copy made once, so that input unit
    j's column is a contiguous row (W_down's kept neurons; TEAL's kept channels)."""

    w: BF16Weight
    w_t: torch.Tensor

    def dense(self, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """v (N, in) -> (N, out): the whole product."""
        return self.w.linear(v, bias)

    def rows_product(self, v_u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """v_u (N, u) holding input units ``rows`` (u,) -> (N, out): only those units' rows of w_t read."""
        return _rounded(v_u, lambda a: a @ self.w_t.index_select(0, rows), None)  # (N, u) @ (u, out)


def quantize(w: torch.Tensor) -> BF16Weight:
    """w (out, in) float -> its bf16 weight (round to nearest even)."""
    return BF16Weight(w.detach().to(ACT).contiguous())


SCHEMES.add("bf16", Scheme(quantize, "bf16 weights and products (half fp32's bytes); the rest stays in the "
                                     "model's dtype"))
