"""SparseMLP: a model's MLPs computed under a contextual-sparsity rule, masked or on the kept neurons only.

    with SparseMLP(model, Oracle(0.5), record=SparsityRecord()):   # or mode="gather" / "cached"
        logits = model(ids).logits

Modes. "mask": the MLP is computed densely through its own modules (so ``Trace`` sees it: ``mlp.post``
is the masked h) and the rule's dropped units are zeroed; at keep 1 the logits are bit-identical.
"gather": only the kept neurons are computed: rows of W_gate/W_up and columns of W_down, the latter
read as contiguous rows of a transposed copy made once on enter (PowerInfer's layout; for one row they
are summed in place, no copy: ``gather.rows_matmul``); TEAL's kept
input channels likewise from transposed copies of W_gate/W_up. Equal to "mask" up to summation order.
"cached": as "gather", but the kept rows live in a per-layer active-set cache (``gather.ActiveSet``) that
each step overwrites only the slots of the neurons leaving the set with those entering it (a static set
is copied once), instead of copying every kept row every step. TEAL's input channels have no cache:
with TEAL "cached" runs as "gather".

How: the forward of each selected MLP module is replaced by an instance attribute on enter and deleted
on exit (the class forward comes back; nothing else is touched, no hooks). OPT has no MLP module (its
layer runs fc1, activation, fc2 inline): there fc1's forward returns the *pre-activation* with dropped
neurons zeroed (every activation here has act(0) = 0, checked on enter) and, in gather mode, only the
kept neurons' columns, which fc2's forward consumes. Inference only: GPT-2's MLP dropout is not applied.
Composes with PolicyCache and ScaledRope by nesting ``with`` blocks (they touch attention and rotary only).
"""
from __future__ import annotations

from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.sparsity.gather import ActiveSet, Scratch, input_sparse, rows_linear, rows_matmul, union
from attnlab.sparsity.record import SparsityRecord  # noqa: F401  (re-exported: callers import it from here)
from attnlab.sparsity.rules import NEEDS, Rule

MODES = ("mask", "gather", "cached")
# gather mode computes a step densely (each row's own dropped neurons still zeroed) when the union of its
# rows' sets holds more than this share of the neurons: copying that many rows costs more than the dense
# matmul saves (bench_sparse_mlp, one SmolLM2-sized layer read from memory: gathering half the rows is
# 1.5x faster than dense, so the break-even is near 0.7). At batch 8 the union of eight tokens' top-50%
# sets is nearly every neuron.
DENSE_ABOVE = 0.6


def _linear(proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The projection's dense product, from its weight (never through a forward SparseMLP replaced)."""
    return F.linear(x, arch.weight(proj), proj.bias)


def layer_list(model: nn.Module, layers: Iterable[int] | None) -> list[int]:
    """The selected decoder layers, sorted (None: all); UsageError for an index out of range."""
    n = len(arch.layers(model))
    if layers is None:
        return list(range(n))
    chosen = sorted({int(i) for i in layers})
    for i in chosen:
        arch.layer(model, i)  # raises the one-line UsageError when out of range
    return chosen


def _find_mlp(model: nn.Module, i: int) -> arch.MLP:
    """Layer i's MLP from the architecture table; a UsageError naming the modules looked for."""
    a = arch.arch_of(model)  # UsageError for a family the table lacks
    looked = ", ".join(p for p in (a.mlp_gate, a.mlp_in, a.mlp_out, a.act_fn) if p)
    try:
        m = arch.mlp(model, i)
    except AttributeError:
        m = None
    if m is None or any(p is None for p in (m.in_proj, m.out_proj, m.act_fn)) or (a.mlp_gate and m.gate_proj is None):
        raise UsageError(f"layer {i} of this {a.family} model lacks the MLP modules SparseMLP looks for "
                         f"({looked}, under {a.layers}.{i}): a custom MLP needs its row in attnlab.models.arch")
    return m


class _Layer:
    """One layer's MLP under the rule: ``front`` (x -> what enters the output projection) and ``back``."""

    def __init__(self, mlp: arch.MLP, layer: int, rule: Rule, mode: str, record, flat: bool, scratch: Scratch):
        self.mlp, self.layer, self.rule, self.mode, self.record, self.flat = mlp, layer, rule, mode, record, flat
        self.scratch = scratch  # shared by the layers: the rows each step's gathers copy
        self.gated = mlp.gate_proj is not None
        self.n = arch.weight(mlp.out_proj).shape[1]  # d_ff
        self._pending = None  # flat gather: what fc1 computed, for fc2
        self.down_t = self.gate_t = self.in_t = self.cache = None
        if mode == "cached" and rule.needs != "x":
            self.cache = ActiveSet.from_mlp(mlp)
        elif mode != "mask":
            # (d_ff, d): neuron j's output column of W_down as a contiguous row (a copy, once)
            self.down_t = arch.weight(mlp.out_proj).detach().T.contiguous()
            if rule.needs == "x":  # (d, d_ff): input channel i's column of W_gate / W_in as a row
                self.in_t = arch.weight(mlp.in_proj).detach().T.contiguous()
                self.gate_t = arch.weight(mlp.gate_proj).detach().T.contiguous() if self.gated else None

    # calls the projection's own forward: the module (hooks fire) unless fc1 is the overridden one
    def _proj(self, proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return type(proj).forward(proj, x) if self.flat and proj is self.mlp.in_proj else proj(x)

    def _note(self, what: str, mask, values) -> None:
        if self.record is not None and mask is not None:
            self.record.add(what, self.layer, mask, values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.back(*self.front(x))

    def fc1(self, x: torch.Tensor) -> torch.Tensor:
        t, self._pending = self.front(x)
        return t

    def fc2(self, h: torch.Tensor) -> torch.Tensor:
        spec, self._pending = self._pending, None
        return self.back(h, spec)

    def front(self, x: torch.Tensor):
        """x (..., d) -> (t, spec): t is h (or, flat, the pre-activation) with dropped units zero."""
        if self.mode == "mask":
            return self._front_mask(x)
        return self._front_cached(x) if self.cache is not None else self._front_gather(x)

    def back(self, h: torch.Tensor, spec) -> torch.Tensor:
        """h -> the MLP's output through the output projection; spec from ``front``."""
        if spec is None:  # mask mode: the dense output projection
            return self._proj(self.mlp.out_proj, h)
        kind, index, shape = spec
        if kind == "dense":  # a union too large to gather: h (N, d_ff) already masked
            out = _linear(self.mlp.out_proj, h)
        elif kind == "cache":  # h (N, m) in the cache's slot order
            out = self.cache.forward_out(h, self.mlp.out_proj.bias)
        elif kind == "rows":  # h (N, u) holds the kept union's neurons: their rows of W_down^T (u, d)
            out = rows_matmul(h, self.down_t, index, self.mlp.out_proj.bias, self.scratch)
        else:  # "in": h (N, d_ff) with TEAL's h mask (N, d_ff) or None
            out = input_sparse(h, index, self.down_t, self.mlp.out_proj.bias, self.scratch)
        return out.view(*shape[:-1], out.shape[-1])  # (..., d)

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

    def _front_mask(self, x: torch.Tensor):
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

    def _front_cached(self, x: torch.Tensor):
        """As ``_front_gather`` for a neuron rule, the union's rows read from the active-set cache."""
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
        return t, ("cache", None, shape)

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

    def _front_gather(self, x: torch.Tensor):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        if self.rule.needs == "x":
            mx = self.rule.mask(x, self.layer)  # (N, d)
            self._note("x", mx, x)
            pre_g = input_sparse(x, mx, self.gate_t, self.mlp.gate_proj.bias, self.scratch) if self.gated else None
            pre = input_sparse(x, mx, self.in_t, self.mlp.in_proj.bias, self.scratch)  # (N, d_ff)
            a, h = self._hidden(pre_g, pre)
            mh = self.rule.mask_h(h, self.layer)  # (N, d_ff) or None
            self._note("h", mh, h)
            return (pre if self.flat else h), ("in", mh, shape)
        needs = self.rule.needs
        mask, a = self._neuron_mask(x)  # (N, d_ff)
        # Batch > 1 (and prefill): one row set per step, the union of the rows' sets, each row's own
        # dropped neurons zeroed. One gather then serves every row as a GEMM (Deja Vu takes the union
        # too); per-row sets would copy B x k rows and run B GEMVs, and the zeroing keeps each row
        # equal to its own masked computation.
        rows = union(mask)  # (u,)
        if rows.numel() > DENSE_ABOVE * self.n:
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


    def _dense_masked(self, x: torch.Tensor, a: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """x (N, d) -> what enters the output projection, computed densely, each row's dropped units zero;
        ``a``: the gate activations the rule already computed (CATS, the oracle) or None."""
        pre = _linear(self.mlp.in_proj, x)  # (N, d_ff)
        if self.gated and a is not None:  # the rule's gate activations: no second gate matmul
            h = a * pre
        else:
            _, h = self._hidden(_linear(self.mlp.gate_proj, x) if self.gated else None, pre)
        return (pre if self.flat else h) * mask


class SparseMLP:
    """Context manager: inside, the selected layers' MLPs keep only the units ``rule`` chooses."""

    def __init__(self, model: nn.Module, rule: Rule, layers: Iterable[int] | None = None, mode: str = "mask",
                 record: SparsityRecord | None = None):
        if mode not in MODES:
            raise UsageError(f"unknown sparse MLP mode {mode!r}: choose mask (measure), gather (compute only "
                             "the kept neurons) or cached (gather from an active-set cache)")
        if getattr(rule, "needs", None) not in NEEDS:
            raise UsageError(f"{type(rule).__name__} is not a sparsity rule (its needs must be one of "
                             f"{', '.join(NEEDS)}): build one with attnlab.sparsity.rules.make_rule")
        self.model, self.rule, self.mode, self.record = model, rule, mode, record
        self.layers = layer_list(model, layers)
        self.flat = arch.arch_of(model).flat_mlp
        self.mlps = {i: _find_mlp(model, i) for i in self.layers}
        for i, m in self.mlps.items():
            if hasattr(rule, "check"):
                rule.check(i, arch.weight(m.out_proj).shape[1])
            if self.flat and float(m.act_fn(torch.zeros(1)).abs()) != 0:
                raise UsageError(f"layer {i}'s activation is not 0 at 0, which the inline-MLP path relies on")
        self._replaced: list[nn.Module] = []

    def __enter__(self) -> "SparseMLP":
        try:
            scratch = Scratch()
            for i, m in self.mlps.items():
                layer = _Layer(m, i, self.rule, self.mode, self.record, self.flat, scratch)
                if not self.flat:
                    self._replace(m.module, layer.forward, i)
                else:
                    self._replace(m.in_proj, layer.fc1, i)
                    if self.mode != "mask":
                        self._replace(m.out_proj, layer.fc2, i)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for module in self._replaced:
            del module.forward  # the class forward comes back
        self._replaced = []

    def _replace(self, module: nn.Module, forward, i: int) -> None:
        if "forward" in module.__dict__:
            raise UsageError(f"layer {i}'s MLP already has its forward replaced (another SparseMLP on it, or an "
                             "accelerate hook): use one SparseMLP per layer")
        module.forward = forward
        self._replaced.append(module)
