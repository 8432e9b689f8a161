"""Contextual sparsity's batch-1 GPU kernels (Triton): a decode step reads only the kept weights.

Neither kernel takes an index list. A masked load fetches nothing, so the rows a mask drops are never read and
no index list is built: ``nonzero`` would wait on the host at every layer, which at batch 1 on a GPU costs more
than the bytes it saves (gather mode at Llama-3-8B's layer on an H100: 0.05x dense, benchmarks/gpu_sparse_kernel.py).
Any rule's mask serves, as it comes: Deja Vu's predicted neurons, the oracle's, TEAL's thresholds.

- :func:`gate_up` -- Deja Vu's row gather for gate/up: h_j = act(W_gate[j] . x) * (W_up[j] . x) for the kept
  neurons j, 0 for the rest; one program per block of rows, the activation fused.
- :func:`rows_axpy` -- the rows of a transposed weight W_t (m, o) weighted by v: y = sum_i v_i W_t[i], reading
  only the rows whose v_i is not 0. Deja Vu's column gather of W_down (v = h, 0 outside the kept neurons) and
  TEAL's input-sparse GEMV (v = x or h with the dropped entries zeroed), one kernel: v's zeros are the mask,
  so a row's weights wait on one load (v_i), not two. The rows are split among programs (split-K) whose
  partial sums meet in a float32 output through atomics, so a 4,096-wide output still fills the GPU.

The block shapes are tuned per weight shape on first use (``triton.autotune``; one shape under the interpreter).
Without a matrix unit in the loop Triton does not pipeline the loads, so what hides memory latency is
occupancy and the bytes each load brings: the configurations differ in exactly those.

Triton is imported here only: the CPU path never loads this module. ``TRITON_INTERPRET=1`` runs both kernels
on CPU tensors (the tests do, where Triton is installed).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

ACTS = {"silu": 1, "relu": 2}  # the activations gate_up fuses; another activation runs the gather path
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _configs(shapes: list[tuple], names: tuple[str, ...]) -> list[triton.Config]:
    """(block..., warps) per configuration; under the interpreter the first alone (it has nothing to time)."""
    return [triton.Config(dict(zip(names, c[:-1])), num_warps=c[-1]) for c in (shapes[:1] if INTERPRET else shapes)]


_GATE_UP = [(16, 512, 4), (8, 512, 4), (8, 1024, 4), (16, 1024, 8), (32, 512, 8), (16, 256, 4)]
_AXPY = [(64, 256, 16, 4), (64, 256, 64, 8), (64, 256, 32, 8), (64, 128, 64, 4), (128, 256, 32, 8),
         (32, 256, 64, 4), (64, 512, 32, 8), (128, 128, 32, 4)]


@triton.autotune(configs=_configs(_GATE_UP, ("BLOCK_N", "BLOCK_D")), key=["n", "d"])
@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, keep_ptr, h_ptr, n, d,
                    GATED: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) neurons
    inside = rows < n
    live = inside & (tl.load(keep_ptr + rows, mask=inside, other=0) != 0)
    base = rows.to(tl.int64)[:, None] * d  # (BLOCK_N, 1) row offsets
    acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(0, d, BLOCK_D):
        cols = k + tl.arange(0, BLOCK_D)  # (BLOCK_D,)
        cm = cols < d
        xv = tl.load(x_ptr + cols, mask=cm, other=0.0).to(tl.float32)[None, :]  # (1, BLOCK_D)
        m = live[:, None] & cm[None, :]  # a dropped row's loads fetch nothing
        wu = tl.load(wu_ptr + base + cols[None, :], mask=m, other=0.0).to(tl.float32)  # (BLOCK_N, BLOCK_D)
        acc_u += tl.sum(wu * xv, axis=1)
        if GATED:
            wg = tl.load(wg_ptr + base + cols[None, :], mask=m, other=0.0).to(tl.float32)
            acc_g += tl.sum(wg * xv, axis=1)
    pre = acc_g if GATED else acc_u
    if ACT == 1:
        a = pre * tl.sigmoid(pre)
    else:
        a = tl.maximum(pre, 0.0)
    h = a * acc_u if GATED else a
    tl.store(h_ptr + rows, tl.where(live, h, 0.0).to(h_ptr.dtype.element_ty), mask=inside)


@triton.autotune(configs=_configs(_AXPY, ("BLOCK_M", "BLOCK_O", "SPLIT")), key=["m", "o"], reset_to_zero=["y_ptr"])
@triton.jit
def _rows_axpy_kernel(v_ptr, w_ptr, y_ptr, m, o, BLOCK_M: tl.constexpr, BLOCK_O: tl.constexpr, SPLIT: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)  # (BLOCK_O,) outputs
    cm = cols < o
    per = tl.cdiv(tl.cdiv(m, SPLIT), BLOCK_M) * BLOCK_M  # rows per program, whole blocks
    start = tl.program_id(1) * per
    acc = tl.zeros((BLOCK_O,), dtype=tl.float32)
    for k in range(start, start + per, BLOCK_M):
        rows = k + tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows of W_t
        vv = tl.load(v_ptr + rows, mask=rows < m, other=0.0).to(tl.float32)  # (BLOCK_M,)
        w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * o + cols[None, :],
                    mask=(vv != 0.0)[:, None] & cm[None, :], other=0.0).to(tl.float32)  # (BLOCK_M, BLOCK_O)
        acc += tl.sum(w * vv[:, None], axis=0)
    tl.atomic_add(y_ptr + cols, acc, mask=cm)


def gate_up(x: torch.Tensor, w_gate: torch.Tensor | None, w_up: torch.Tensor, keep: torch.Tensor,
            act: str) -> torch.Tensor:
    """x (d,), W_gate / W_up (n, d) (W_gate None: a plain MLP, h = act(W_up x)), keep (n,) bool -> h (n,) in
    x's dtype, 0 where a neuron is dropped; only the kept neurons' rows are read."""
    n, d = w_up.shape
    h = torch.empty(n, dtype=x.dtype, device=x.device)
    gated = w_gate is not None
    _gate_up_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)](
        x.contiguous(), (w_gate if gated else w_up).contiguous(), w_up.contiguous(),
        keep.contiguous().view(torch.uint8), h, n, d, GATED=gated, ACT=ACTS[act])
    return h


def rows_axpy(v: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """v (m,), W_t (m, o) -> y (o,) float32 = sum_i v_i W_t[i], reading only the rows where v_i is not 0 (zero
    the dropped entries of v first: that is the mask)."""
    m, o = w_t.shape
    y = torch.zeros(o, dtype=torch.float32, device=v.device)
    _rows_axpy_kernel[lambda meta: (triton.cdiv(o, meta["BLOCK_O"]), meta["SPLIT"])](
        v.contiguous(), w_t.contiguous(), y, m, o)
    return y
