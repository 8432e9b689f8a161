"""SparseMLP's "kernel" mode: a decode step (one token) on a GPU runs the Triton kernels of
:mod:`attnlab.sparsity.kernels` on the rule's masks; everything else -- prefill, batches, the CPU, biased or
quantized or inline (OPT) MLPs, an activation the kernel does not fuse -- runs "gather" mode's path unchanged.

Why a mask and not gather's index list: on a GPU at batch 1 the index list's ``nonzero`` waits on the host at
every layer and the copies cost more than they save (gather mode on an H200: 0.08x dense at Llama-2-7B's layer);
the kernels read the kept rows in place and skip the rest.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from attnlab.core import weights
from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.sparsity.mlp_layers import GatherLayer


def _act(fn: nn.Module) -> str | None:
    """The name under which the kernel fuses this activation, or None."""
    name = type(fn).__name__.lower()
    return "silu" if "silu" in name else "relu" if name == "relu" else None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"  # Triton runs its kernels on CPU tensors (the tests)


class KernelLayer(GatherLayer):
    """Gather mode, except one token on a GPU: h from the kept rows of W_gate / W_up (Deja Vu's neurons) or
    of their transposes (TEAL's input channels), then the kept rows of W_down^T, each by one kernel."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        projs = [p for p in (self.mlp.gate_proj, self.mlp.in_proj, self.mlp.out_proj) if p is not None]
        plain = all(p.bias is None and weights.of(p) is None for p in projs) and not self.flat
        self.fused = _act(self.mlp.act_fn) if plain else None  # None: gather's path at every step
        self.k = None
        if self.fused is not None and (arch.weight(self.mlp.out_proj).is_cuda or _interpreting()):
            try:
                from attnlab.sparsity import kernels
            except ImportError:
                raise UsageError("sparse MLP mode kernel needs Triton on a GPU (it comes with PyTorch's CUDA "
                                 "builds; pip install triton): or use mode gather") from None
            self.k = kernels

    def _kernel(self, x: torch.Tensor) -> bool:
        return self.k is not None and x.shape[0] == 1 and (x.is_cuda or _interpreting())

    def front(self, x: torch.Tensor):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        if not self._kernel(x):
            return super().front(x.view(shape))
        if self.rule.needs == "x":  # TEAL: the kept input channels' rows of W_gate^T / W_in^T
            mx = self.rule.mask(x, self.layer)  # (1, d)
            self._note("x", mx, x)
            xm = (x * mx)[0]  # (d,): the dropped channels zero, which the kernel skips
            # each projection rounded to the model's dtype, as its dense product is: the same h to threshold
            pre_g = self.k.rows_axpy(xm, self.gate_t).to(x.dtype)[None] if self.gated else None  # (1, d_ff)
            _, h = self._hidden(pre_g, self.k.rows_axpy(xm, self.in_t).to(x.dtype)[None])
            mh = self.rule.mask_h(h, self.layer)  # (1, d_ff) or None
            self._note("h", mh, h)
            return (h if mh is None else h * mh), ("kernel", shape)
        mask, _ = self._neuron_mask(x)  # (1, d_ff)
        w_gate = arch.weight(self.mlp.gate_proj) if self.gated else None
        h = self.k.gate_up(x[0], w_gate, arch.weight(self.mlp.in_proj), mask[0], self.fused)  # (d_ff,), 0 if dropped
        return h[None], ("kernel", shape)

    def back(self, h: torch.Tensor, spec) -> torch.Tensor:
        if spec[0] != "kernel":
            return super().back(h, spec)
        shape = spec[1]
        out = self.k.rows_axpy(h.reshape(-1), self.down_t).to(h.dtype)  # (d,): h's zeros are rows not read
        return out.view(*shape[:-1], out.shape[-1])
