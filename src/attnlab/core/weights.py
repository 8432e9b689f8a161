"""The weight layout protocol: what a quantized projection's weight offers the code that reads it.

A weight scheme (``attnlab.quant.schemes``) turns a projection's float weight into an object of its own, kept on
the module under :data:`ATTR` while the scheme is entered, and the module's forward becomes
:class:`QuantForward` over it. Whatever the scheme, that object answers three questions, so the code that reads
a weight piecewise (the sparse MLP's gathers) never knows which scheme made it:

    w.linear(x, bias)          x (..., in) -> (..., out): the whole product
    w.rows(rows, scratch)      the output units ``rows`` (u,) as a weight of the same protocol
    w.columns()                the weight read by input units: .dense(v, bias), .rows_product(v_u, rows)

and ``w.nbytes`` (what it stores) and ``w.dequantize()`` ((out, in) float32, what the product stands for).
``scratch``, if given, lends buffers: ``scratch.take(like, n)`` is an ``(n, *like.shape[1:])`` tensor of
``like``'s dtype, valid until its next call. Pure torch.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch

ATTR = "attnlab_quantized"  # where a quantized projection keeps its weight (attnlab.quant.transform sets it)


class Columns(Protocol):
    def dense(self, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor: ...  # (N, in) -> (N, out)

    def rows_product(self, v_u: torch.Tensor, rows: torch.Tensor) -> torch.Tensor: ...  # (N, u) -> (N, out)


class Layout(Protocol):
    nbytes: int

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor: ...

    def rows(self, rows: torch.Tensor, scratch: Any = None) -> "Layout": ...

    def columns(self) -> Columns: ...

    def dequantize(self) -> torch.Tensor: ...


def of(module) -> Layout | None:
    """A projection's quantized weight while a scheme is entered on it, else None (its float weight rules)."""
    return getattr(module, ATTR, None)


class QuantForward:
    """A projection's forward on its quantized weight (the transform installs it as the module's forward)."""

    def __init__(self, w: Layout, bias: torch.Tensor | None):
        self.w, self.bias = w, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.w.linear(x, self.bias)
