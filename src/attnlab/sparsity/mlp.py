"""SparseMLP: a model's MLPs computed under a contextual-sparsity rule, masked or on the kept neurons only.

    with SparseMLP(model, Oracle(0.5), record=SparsityRecord()):   # or mode="gather" / "cached"
        logits = model(ids).logits

Modes. "mask": the MLP is computed densely through its own modules (so ``Trace`` sees it: ``mlp.post``
is the masked h) and the rule's dropped units are zeroed; at keep 1 the logits are bit-identical.
"gather": only the kept neurons are computed: rows of W_gate/W_up and columns of W_down, the latter
read as contiguous rows of a transposed copy made once on enter (PowerInfer's layout; for one row they
are summed in place, no copy: ``gather.rows_matmul``). With several rows (batch > 1, prefill) one set
serves the step, the union of the rows' sets, each row's own dropped neurons zeroed; when that union
holds more than ``DENSE_ABOVE`` of the neurons the step is computed densely instead (masked alike).
TEAL's kept input channels likewise from transposed copies of W_gate/W_up. Equal to "mask" up to
summation order. "cached": as "gather", but the kept rows live in a per-layer active-set cache
(``gather.ActiveSet``) that each step overwrites only the slots of the neurons leaving the set with those
entering it (a static set is copied once), instead of copying every kept row every step. TEAL's input
channels have no cache: with TEAL "cached" runs as "gather". "kernel": as "gather", but a decode step (one
token) on a GPU reads the kept rows in place through Triton kernels driven by the rule's mask, with no index
list (:mod:`attnlab.sparsity.kernels`). One class per mode computes a layer (:mod:`attnlab.sparsity.mlp_layers`,
:mod:`attnlab.sparsity.mlp_kernel`).

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
from torch import nn

from attnlab.core import weights
from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.sparsity.gather import Scratch
from attnlab.sparsity.mlp_layers import CachedLayer, GatherLayer, MaskLayer, SparseLayer
from attnlab.sparsity.record import SparsityRecord  # noqa: F401  (re-exported: callers import it from here)
from attnlab.sparsity.rules import NEEDS, Rule

MODES = ("mask", "gather", "cached", "kernel")
# gather mode computes a step densely (each row's own dropped neurons still zeroed) when the union of its
# rows' sets holds more than this share of the neurons: copying that many rows costs more than the dense
# matmul saves (bench_sparse_mlp, one SmolLM2-sized layer read from memory: gathering half the rows is
# 1.5x faster than dense, so the break-even is near 0.7). At batch 8 the union of eight tokens' top-50%
# sets is nearly every neuron.
DENSE_ABOVE = 0.6


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


class SparseMLP:
    """Context manager: inside, the selected layers' MLPs keep only the units ``rule`` chooses."""

    def __init__(self, model: nn.Module, rule: Rule, layers: Iterable[int] | None = None, mode: str = "mask",
                 record: SparsityRecord | None = None):
        if mode not in MODES:
            raise UsageError(f"unknown sparse MLP mode {mode!r}: choose mask (measure), gather (compute only "
                             "the kept neurons), cached (gather from an active-set cache) or kernel (gather, with "
                             "a decode step on a GPU in Triton kernels)")
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
        if mode == "cached" and any(weights.of(p) is not None for m in self.mlps.values() for p in m[1:4]):
            raise UsageError("the active-set cache (mode cached) holds float rows: on quantized weights use mode "
                             "gather")
        self._replaced: list[tuple[nn.Module, object]] = []

    def predictor_bytes(self) -> int:
        """The predictor weights a decode step reads beside the model's (Deja Vu's; 0 for a rule without)."""
        step_bytes = getattr(self.rule, "step_bytes", None)
        return step_bytes(self.layers) if step_bytes is not None else 0

    def __enter__(self) -> "SparseMLP":
        try:
            scratch = Scratch()
            for i, m in self.mlps.items():
                layer = self._layer(m, i, scratch)
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

    def _layer(self, m: arch.MLP, i: int, scratch: Scratch) -> SparseLayer:
        """Layer i's MLP in this mode (TEAL's input channels have no active-set cache: "cached" gathers)."""
        args = (m, i, self.rule, self.record, self.flat, scratch)
        if self.mode == "mask":
            return MaskLayer(*args)
        if self.mode == "cached" and self.rule.needs != "x":
            return CachedLayer(*args)
        if self.mode == "kernel":
            from attnlab.sparsity.mlp_kernel import KernelLayer

            return KernelLayer(*args, dense_above=DENSE_ABOVE)
        return GatherLayer(*args, dense_above=DENSE_ABOVE)  # read on enter: a test may set it

    def __exit__(self, *exc) -> None:
        for module, before in reversed(self._replaced):
            if before is None:
                del module.forward  # the class forward comes back
            else:
                module.forward = before  # a quantized projection's forward (QuantizedWeights outside this)
        self._replaced = []

    def _replace(self, module: nn.Module, forward, i: int) -> None:
        before = module.__dict__.get("forward")
        if before is not None and not isinstance(before, weights.QuantForward):
            raise UsageError(f"layer {i}'s MLP already has its forward replaced (another SparseMLP on it, or an "
                             "accelerate hook): use one SparseMLP per layer")
        module.forward = forward
        self._replaced.append((module, before))
