"""SparseHeads: per token keep only the attention heads with the largest output norm (Deja Vu's head sparsity).

A head's output is its slice z_h (d_h,) of the input of the attention's output projection (``Trace``'s
``blocks.{i}.attn.z``, (B, T, H, d_h)); the heads whose ‖z_h‖ is not among the top k = keep_count(H, keep)
of that token are zeroed before o_proj. A forward pre-hook on each selected layer's output projection
(found through attnlab.models.arch), removed on exit::

    with SparseHeads(model, keep=0.5):
        logits = model(ids).logits
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from attnlab.models import arch
from attnlab.sparsity.mlp import SparsityRecord, layer_list
from attnlab.sparsity.rules import keep_count, topk_mask


class SparseHeads:
    """Context manager: inside, each selected layer's attention keeps its top-k heads per token."""

    def __init__(self, model: nn.Module, keep: float, layers: Iterable[int] | None = None,
                 record: SparsityRecord | None = None):
        self.n_heads = arch.dims(model).n_heads
        self.k = keep_count(self.n_heads, keep)
        self.model, self.keep, self.record = model, keep, record
        self.layers = layer_list(model, layers)
        self.outs = {i: arch.attention(model, i).o for i in self.layers}
        self._handles: list = []

    def __enter__(self) -> "SparseHeads":
        for i, o in self.outs.items():
            self._handles.append(o.register_forward_pre_hook(self._hook(i), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, layer: int):
        def hook(module, args, kwargs):
            z, zh = head_inputs(args, kwargs, self.n_heads)
            norms = zh.float().norm(dim=-1)  # (..., H)
            mask = topk_mask(norms, self.keep)  # (..., H)
            if self.record is not None:
                self.record.add("heads", layer, mask, norms)
            if self.k == self.n_heads:
                return None  # keep 1: the identity
            return heads_zeroed(args, kwargs, z, zh, mask)

        return hook


def head_inputs(args, kwargs, n_heads: int):
    """From a forward pre-hook on the output projection: its input z (..., H * d_h) and z per head (..., H, d_h)."""
    z = args[0] if args else kwargs["input"]
    return z, z.reshape(*z.shape[:-1], n_heads, -1)


def heads_zeroed(args, kwargs, z: torch.Tensor, zh: torch.Tensor, mask: torch.Tensor):
    """The pre-hook's return: the projection's arguments with the heads outside ``mask`` (..., H) zeroed."""
    z = (zh * mask[..., None]).reshape(z.shape)  # (..., H * d_h)
    return ((z, *args[1:]), kwargs) if args else (args, {**kwargs, "input": z})
