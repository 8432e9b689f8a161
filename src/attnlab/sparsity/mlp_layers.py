"""One layer's MLP under a sparsity rule, one class per way of computing it (SparseMLP's modes).

Each splits the MLP at its output projection: ``front`` (x -> what enters the output projection, with the
rule's dropped units zero, and what ``back`` needs to finish) and ``back`` (-> the MLP's output). SparseMLP
installs ``forward`` as a whole MLP module's forward or, for OPT's inline MLP (``flat``), ``fc1`` and
``fc2`` as the two projections' forwards; a flat ``front`` returns the *pre-activation* (the layer applies
the activation itself, act(0) = 0).

- :class:`MaskLayer` ("mask"): the dense computation through the MLP's own modules, dropped units zeroed.
- :class:`GatherLayer` ("gather"): only the kept neurons' rows of W_gate/W_up and of W_down^T (a transposed
  copy made once), one row set per step (the union of the rows' sets), or the dense product when that
  union is too large to pay; TEAL's kept input channels from transposed copies of W_gate/W_up.
- :class:`CachedLayer` ("cached", neuron rules): the kept rows read from a per-layer active-set cache.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core import weights
from attnlab.models import arch
from attnlab.sparsity.gather import ActiveSet, Scratch, input_sparse, rows_linear, rows_matmul, transposed, union
from attnlab.sparsity.rules import Rule


def _linear(proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The projection's dense product, from its weight (never through a forward SparseMLP replaced): its quantized
    weight where a scheme is entered on it."""
    wq = weights.of(proj)
    return F.linear(x, arch.weight(proj), proj.bias) if wq is None else wq.linear(x, proj.bias)


class SparseLayer:
    """What every mode shares: the forwards SparseMLP installs, the activations, and what the rule decides."""

    def __init__(self, mlp: arch.MLP, layer: int, rule: Rule, record, flat: bool, scratch: Scratch):
        self.mlp, self.layer, self.rule, self.record, self.flat = mlp, layer, rule, record, flat
        self.scratch = scratch  # shared by the layers: the rows each step's gathers copy
        self.gated = mlp.gate_proj is not None
        self.n = arch.weight(mlp.out_proj).shape[1]  # d_ff
        self._pending = None  # flat: what fc1's front left for fc2's back

    def front(self, x: torch.Tensor):
        raise NotImplementedError

    def back(self, h: torch.Tensor, spec) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.back(*self.front(x))

    def fc1(self, x: torch.Tensor) -> torch.Tensor:
        t, self._pending = self.front(x)
        return t

    def fc2(self, h: torch.Tensor) -> torch.Tensor:
        spec, self._pending = self._pending, None
        return self.back(h, spec)

    # calls the projection's own forward: the module (hooks fire) unless fc1 is the overridden one
    def _proj(self, proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return _linear(proj, x) if self.flat and proj is self.mlp.in_proj else proj(x)

    def _note(self, what: str, mask, values) -> None:
        if self.record is not None and mask is not None:
            self.record.add(what, self.layer, mask, values)

    def _hidden(self, pre_g, pre):
        """(act(gate) or None, h) from the gate and in projections' outputs."""
        a = self.mlp.act_fn(pre_g if self.gated else pre)
        return a, a * pre if self.gated else a

    def _decide(self, x, a, h, like: torch.Tensor) -> torch.Tensor | None:
        """The neuron mask (..., d_ff) from what the rule needs; ``like`` has the neurons' shape."""
        needs = self.rule.needs
        if needs == "h":
            return self.rule.mask(h, self.layer)
        if needs == "gate":
            return self.rule.mask(a, self.layer)
        if needs == "input":
            return self.rule.mask(x, self.layer)
        if needs == "static":
            return self.rule.mask(like, self.layer).expand(like.shape)
        return self.rule.mask_h(h, self.layer)  # "x": TEAL's own h thresholds (or None)

    def _neuron_mask(self, x: torch.Tensor):
        """x (N, d) -> (mask (N, d_ff), act(gate(x)) (N, d_ff) or None): what a neuron rule keeps, computing
        densely only what it needs to decide (the oracle: h; CATS: the gate activations)."""
        needs = self.rule.needs
        a = h = None
        if needs == "h" or (needs == "gate" and not self.gated):  # the oracle decides on the dense h
            a, h = self._hidden(self._proj(self.mlp.gate_proj, x) if self.gated else None,
                                self._proj(self.mlp.in_proj, x))
        elif needs == "gate":  # CATS: the dense gate activations, before up_proj
            a = self.mlp.act_fn(self._proj(self.mlp.gate_proj, x))  # (N, d_ff)
        mask = self._decide(x, a, h, x[:, :1].expand(x.shape[0], self.n))  # (N, d_ff); like: a view, no allocation
        self._note("h", mask, h)
        return mask, a


class MaskLayer(SparseLayer):
    """The dense MLP through its own modules (``Trace`` sees it), the rule's dropped units zeroed."""

    def front(self, x: torch.Tensor):
        x_in = x
        if self.rule.needs == "x":
            mx = self.rule.mask(x, self.layer)  # (..., d)
            self._note("x", mx, x)
            x = x * mx
        pre_g = self._proj(self.mlp.gate_proj, x) if self.gated else None  # (..., d_ff)
        pre = self._proj(self.mlp.in_proj, x)  # (..., d_ff)
        a, h = self._hidden(pre_g, pre)
        mask = self._decide(x_in, a, h, h)  # (..., d_ff) or None
        self._note("h", mask, h)
        t = pre if self.flat else h  # flat: the layer applies act itself, act(0) = 0
        return (t if mask is None else t * mask), None

    def back(self, h: torch.Tensor, spec) -> torch.Tensor:
        return self._proj(self.mlp.out_proj, h)  # the dense output projection


class GatherLayer(SparseLayer):
    """Only the kept neurons (or TEAL's kept input channels) computed, from per-step gathers of their rows."""

    def __init__(self, mlp: arch.MLP, layer: int, rule: Rule, record, flat: bool, scratch: Scratch,
                 dense_above: float):
        super().__init__(mlp, layer, rule, record, flat, scratch)
        self.dense_above = dense_above  # a step whose union holds more of the neurons is computed densely
        # (d_ff, d): neuron j's output column of W_down as a contiguous row (a copy, once; int8 where quantized)
        self.down_t = transposed(mlp.out_proj)
        self.gate_t = self.in_t = None
        if rule.needs == "x":  # (d, d_ff): input channel i's column of W_gate / W_in as a row
            self.in_t = transposed(mlp.in_proj)
            self.gate_t = transposed(mlp.gate_proj) if self.gated else None

    def front(self, x: torch.Tensor):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        if self.rule.needs == "x":
            return self._front_channels(x, shape)
        needs = self.rule.needs
        if x.shape[0] == 1 and self.record is None and hasattr(self.rule, "indices"):
            # one token (decode): the rule names its kept neurons itself -- no mask built and read back
            rows, a, kept = self.rule.indices(x, self.layer), None, None  # (k,)
        else:
            mask, a = self._neuron_mask(x)  # (N, d_ff)
            # Batch > 1 (and prefill): one row set per step, the union of the rows' sets, each row's own
            # dropped neurons zeroed. One gather then serves every row as a GEMM (Deja Vu takes the union
            # too); per-row sets would copy B x k rows and run B GEMVs, and the zeroing keeps each row
            # equal to its own masked computation.
            rows = union(mask)  # (u,)
            if rows.numel() > self.dense_above * self.n:
                return self._dense_masked(x, a, mask), ("dense", None, shape)
            kept = mask.index_select(1, rows) if x.shape[0] > 1 else None  # (N, u)
        pre_u = rows_linear(x, self.mlp.in_proj, rows, self.scratch)  # (N, u)
        if not self.gated:
            h_u = self.mlp.act_fn(pre_u)
        else:  # CATS reuses its gate activations; the oracle recomputes the kept rows (its dense h only decided)
            gate_u = rows_linear(x, self.mlp.gate_proj, rows, self.scratch) if needs != "gate" else None
            g_u = a.index_select(1, rows) if needs == "gate" else self.mlp.act_fn(gate_u)
            h_u = g_u * pre_u  # (N, u)
        t = pre_u if self.flat else h_u
        return (t * kept if x.shape[0] > 1 else t), ("rows", rows, shape)  # one row: its own set, nothing to zero

    def _front_channels(self, x: torch.Tensor, shape):
        """TEAL: x (N, d) -> h (N, d_ff) from the kept input channels' rows of W_gate^T / W_in^T."""
        mx = self.rule.mask(x, self.layer)  # (N, d)
        self._note("x", mx, x)
        pre_g = input_sparse(x, mx, self.gate_t, self.mlp.gate_proj.bias, self.scratch) if self.gated else None
        pre = input_sparse(x, mx, self.in_t, self.mlp.in_proj.bias, self.scratch)  # (N, d_ff)
        a, h = self._hidden(pre_g, pre)
        mh = self.rule.mask_h(h, self.layer)  # (N, d_ff) or None
        self._note("h", mh, h)
        return (pre if self.flat else h), ("in", mh, shape)

    def _dense_masked(self, x: torch.Tensor, a: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """x (N, d) -> what enters the output projection, computed densely, each row's dropped units zero;
        ``a``: the gate activations the rule already computed (CATS, the oracle) or None."""
        pre = _linear(self.mlp.in_proj, x)  # (N, d_ff)
        if self.gated and a is not None:  # the rule's gate activations: no second gate matmul
            h = a * pre
        else:
            _, h = self._hidden(_linear(self.mlp.gate_proj, x) if self.gated else None, pre)
        return (pre if self.flat else h) * mask

    def back(self, h: torch.Tensor, spec) -> torch.Tensor:
        kind, index, shape = spec
        bias = self.mlp.out_proj.bias
        if kind == "dense":  # a union too large to gather: h (N, d_ff) already masked
            out = _linear(self.mlp.out_proj, h)
        elif kind == "rows":  # h (N, u) holds the kept union's neurons: their rows of W_down^T (u, d)
            out = rows_matmul(h, self.down_t, index, bias, self.scratch)
        else:  # "in": h (N, d_ff) with TEAL's h mask (N, d_ff) or None
            out = input_sparse(h, index, self.down_t, bias, self.scratch)
        return out.view(*shape[:-1], out.shape[-1])  # (..., d)


class CachedLayer(SparseLayer):
    """As :class:`GatherLayer` for a neuron rule, the union's rows read from an active-set cache that each
    step updates only for the neurons entering and leaving the set (a static set: loaded once)."""

    def __init__(self, mlp: arch.MLP, layer: int, rule: Rule, record, flat: bool, scratch: Scratch):
        super().__init__(mlp, layer, rule, record, flat, scratch)
        self.cache = ActiveSet.from_mlp(mlp)

    def front(self, x: torch.Tensor):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        mask, _ = self._neuron_mask(x)  # (N, d_ff)
        if self.rule.needs != "static" or self.cache.steps == 0:  # a static set is loaded once
            self.cache.update(mask.any(0))
        y = self.cache.forward_in(x)  # (N, m, g)
        pre_u = y[..., -1]  # (N, m) up (or in)
        h_u = self.mlp.act_fn(y[..., 0]) * pre_u if self.gated else self.mlp.act_fn(pre_u)
        t = pre_u if self.flat else h_u
        if x.shape[0] > 1 and self.rule.needs != "static":  # each row's own dropped neurons: zero (see gather)
            t = t * mask.index_select(1, self.cache.neurons)
        return t, shape

    def back(self, h: torch.Tensor, shape) -> torch.Tensor:
        out = self.cache.forward_out(h, self.mlp.out_proj.bias)  # h (N, m) in the cache's slot order
        return out.view(*shape[:-1], out.shape[-1])  # (..., d)
