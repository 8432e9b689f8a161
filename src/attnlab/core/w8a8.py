"""W8A8: int8 weights *and* int8 activations, the products in integers -- the kind of scheme llama.cpp's Q8_0 is.

    w = quantize(w)             # w (out, in) float -> W8A8Weight: the int8 weight of attnlab.core.int8, unchanged
    y = w.linear(x, bias)       # x (..., in) -> (..., out), ~ F.linear(x, w.dequantize(), bias)
    w = quantize(w, smoothing(x_max, w))   # SmoothQuant: x_max (in,) each input unit's max |x| on a calibration text

Each activation row (a token) is scaled by max|x_row| / 127 and rounded to int8 when the product is taken
(dynamic, per token, symmetric: SmoothQuant's per-token W8A8), then ``torch._int_mm``
sums int8 x int8 in int32 -- exact -- and the row's and the output channel's scales multiply the sums:

    y[m, n] = a[m] * s[n] * sum_k round(x[m, k] / a[m]) * q[n, k]

Why: on the Intel Xeon and the AMD EPYC measured (both AVX-512 VNNI), the compiled step with these products
decodes faster than with the weight-only kernel's (bf16 activations; benchmarks/bench_llamacpp.py's w8a8 rows),
because the integer dot products are the CPU's own instruction and the kernel takes the weight (N, K) as the
transposed view it likes.
Eager it is slower: the rounding is several small ops a projection, which only a compiled graph fuses. What it
costs: each activation rounded to within half a step of max|x_row| / 127, where weight-only int8 keeps bf16
activations; ``attnlab reproduce quant-agreement --set scheme=w8a8`` measures that on a real model. Q8_0 rounds
activations too, in blocks of 32 (a finer scale than one per row). Pure torch.

Smoothing (SmoothQuant, Xiao et al. 2023): a row's scale is set by its largest unit, and a few input units
(outlier channels, the same ones token after token) are far larger than the rest, so the rest round to few
levels. Dividing input unit j by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) and multiplying the weight's
column j by it leaves the product unchanged in exact arithmetic, and moves the difficulty from the activations
to the weights (alpha = 0.5: half each side). max|X_j| is measured once, on a calibration text
(:mod:`attnlab.quant.calibrate`); the division is one more elementwise op on the input, fused into the
rounding in a compiled step.

Two slices (``w8a8x2``): the activations as precise as weight-only int8's, the products still the integer
kernel's. Each row is rounded to int8 as above (the high slice, step a = max|x_row| / 127), and what that
rounding left, within half a step, is rounded again at a step SLICE times finer (the low slice, -127..127):

    x[m, k] = a[m] * (hi[m, k] + lo[m, k] / SLICE)   to half a low step, a[m] / 508 (about 15 bits)
    y[m, n] = a[m] * s[n] * (sum_k hi[m, k] q[n, k] + sum_k lo[m, k] q[n, k] / SLICE)

The 2M slice rows go through one ``torch._int_mm``, which reads the weight once for both; the second row's
arithmetic is not free (benchmarks/bench_int8.py's int_mm rows, and bench_llamacpp.py's w8a8x2 rows). The idea
is the Ozaki scheme's (splitting a float matrix into int8 slices to run a float product on an integer unit;
Ootomo, Ozaki & Yokota 2024), taken to two slices and to the activations only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.core import int8

LEVELS = 127.0  # symmetric int8: -127..127
SLICE = 2 * LEVELS  # the low slice's step is the high one's / SLICE: the high rounding's residue spans -127..127
ALPHA = 0.5  # SmoothQuant's migration strength: the paper's default, fixed before the first run here


def row_steps(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, k) float -> (x / a (M, k) float32, a (M, 1) float32): each row in steps of a = max|x_row| / 127."""
    x = x.float()
    a = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / LEVELS  # an all-zero row: any scale, x / a = 0
    return x / a, a


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, k) float -> (xq (M, k) int8, a (M, 1) float32): row m is a[m] * xq[m] to half a step."""
    u, a = row_steps(x)
    return torch.round(u).clamp_(-LEVELS, LEVELS).to(torch.int8), a


def matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (M, k) float @ q (N, k)^T int8 * scale (N,) -> (M, N) in x's dtype, x rounded per row to int8."""
    if x.shape[-1] == 0:  # no input unit (a sparse product that kept none): no row to scale
        return x.new_zeros(x.shape[0], q.shape[0])
    xq, a = quantize_rows(x)
    if x.device.type != "cpu":  # the integer kernel is the CPU's here: elsewhere the same rounding, in float
        return F.linear((xq * a).to(x.dtype), q.to(x.dtype) * scale.to(x.dtype)[:, None])
    acc = torch._int_mm(xq, q.t())  # (M, N) int32, exact; q.t(): the (N, k) weight as the view the kernel likes
    return (acc * (a * scale.float())).to(x.dtype)


def split_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, k) float -> (slices (2M, k) int8, a (M, 1) float32): rows 0..M-1 the high slice (quantize_rows'),
    M..2M-1 the low one, the high rounding's residue at a step a / SLICE; a * (hi + lo / SLICE) is x to half a
    low step."""
    u, a = row_steps(x)  # (M, k) in high steps, -127..127
    hi = torch.round(u).clamp_(-LEVELS, LEVELS)
    lo = torch.round((u - hi) * SLICE).clamp_(-LEVELS, LEVELS)  # the residue, within half a high step
    # Why both rounded in float and cast once: one cast of the (2M, k) block, no int8 -> float round trip for
    # the residue -- fewer ops for a compiled step to fuse.
    return torch.cat([hi, lo]).to(torch.int8), a


def matmul_x2(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (M, k) float @ q (N, k)^T int8 * scale (N,) -> (M, N) in x's dtype, x as its two int8 slices."""
    m = x.shape[0]
    if x.shape[-1] == 0:  # no input unit (a sparse product that kept none): no row to scale
        return x.new_zeros(m, q.shape[0])
    slices, a = split_rows(x)
    if x.device.type != "cpu":  # elsewhere the same slices, summed in float
        whole = (slices[:m].float() + slices[m:].float() / SLICE) * a
        return F.linear(whole.to(x.dtype), q.to(x.dtype) * scale.to(x.dtype)[:, None])
    acc = torch._int_mm(slices, q.t())  # (2M, N) int32: each slice's exact sums
    s = a * scale.float()  # (M, N): the high slice's scale; the low one's is s / SLICE
    return (acc[:m] * s + acc[m:] * (s / SLICE)).to(x.dtype)


class W8A8Weight(int8.Int8Weight):
    """The int8 weight (q, scale, n_in) whose products round their activations to int8 too: every product
    (whole, gathered rows, kept columns) goes through :func:`matmul`."""

    __slots__ = ()

    def product(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return matmul(x, q, scale)


class W8A8x2Weight(int8.Int8Weight):
    """The int8 weight whose products take each activation as two int8 slices: every product (whole, gathered
    rows, kept columns) goes through :func:`matmul_x2`."""

    __slots__ = ()

    def product(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return matmul_x2(x, q, scale)


def quantize_x2(w: torch.Tensor) -> W8A8x2Weight:
    """w (out, in) float -> the int8 weight int8's quantize makes, its products in two activation slices."""
    return W8A8x2Weight(*int8.quantize(w))


def quantize(w: torch.Tensor, smooth: torch.Tensor | None = None) -> W8A8Weight:
    """w (out, in) float -> its W8A8 weight: the weight int8's quantize makes (one scale per output channel),
    of W diag(smooth) if given (SmoothQuant; its products divide their input by smooth)."""
    return W8A8Weight(*int8.quantize(w, smooth))


def smoothing(x_max: torch.Tensor, w: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """x_max (in,) each input unit's max |x| on a calibration text, w (out, in) -> s (in,) float32:
    s_j = max|X_j|^alpha / max|W_j|^(1 - alpha). A unit the calibration never saw nonzero (or a zero column)
    is clamped away from 0, so s stays finite and positive."""
    a = x_max.detach().float().clamp_min(1e-5)
    b = w.detach().float().abs().amax(0).clamp_min(1e-5)  # (in,) each column's max |w|
    return a.pow(alpha) / b.pow(1 - alpha)


def smoothquant(w: torch.Tensor, x_max: torch.Tensor) -> W8A8Weight:
    """w (out, in) float and its input units' calibration maxima x_max (in,) -> the smoothed W8A8 weight."""
    return quantize(w, smoothing(x_max, w))
