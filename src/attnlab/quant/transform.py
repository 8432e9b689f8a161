"""QuantizedWeights: a model's projections computed from quantized weights, reversibly.

    with QuantizedWeights(model, "int8"):          # composes: nest PolicyCache, ScaledRope, SparseMLP inside
        logits = model(ids).logits

On enter every projection the architecture table names (attention q/k/v or fused qkv and o, the MLP's
in/gate/out, the LM head) gets its quantized weight as an attribute (``attnlab.core.weights.ATTR``) and a forward
that reads it, installed as an instance attribute; on exit both are deleted, the class forward comes back.
The float weights are never touched, so the model is restored bit for bit (and memory holds both while
inside: int8 adds a quarter of the float weights' bytes; what decode *reads* is the int8 copy). SparseMLP
entered inside reads the int8 rows it gathers (``attnlab.sparsity.gather``); entered outside, it keeps its
float copies -- so enter this first (it refuses a forward some other method already replaced).
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from attnlab.core import weights
from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.quant.calibrate import input_maxima
from attnlab.quant.schemes import SCHEMES


def projections(model: nn.Module, lm_head: bool = True) -> list[nn.Module]:
    """Every projection the architecture table names, layer by layer (then the LM head): a UsageError for a
    family the table lacks."""
    found = []
    for i in range(len(arch.layers(model))):
        a, m = arch.attention(model, i), arch.mlp(model, i)
        found += [p for p in (a.q, a.k, a.v, a.qkv, a.o, m.gate_proj, m.in_proj, m.out_proj) if p is not None]
    head = arch.lm_head(model) if lm_head else None
    found += [head] if head is not None else []
    if not found:
        raise UsageError(f"no projections found in this {arch.arch_of(model).family} model: its row in "
                         "attnlab.models.arch names none that exist")
    return found


class QuantizedWeights:
    """Context manager: inside, ``model``'s projections compute from weights quantized by ``scheme``. A
    calibrated scheme (SmoothQuant) reads ``calibration`` (T,) token ids, run through the float model on
    enter (``progress`` advanced by the tokens run)."""

    def __init__(self, model: nn.Module, scheme: str = "int8", lm_head: bool = True,
                 calibration: torch.Tensor | None = None, progress=None):
        self.scheme = SCHEMES.get(scheme)  # an unknown scheme: did you mean
        if self.scheme.calibrated and calibration is None:
            raise UsageError(f"{scheme} calibrates on a text: enter it as --method {scheme} (its calibration= "
                             "option names the text), or give QuantizedWeights calibration token ids")
        self.model, self.calibration, self.progress = model, calibration, progress
        self.projs = projections(model, lm_head)
        for p in self.projs:
            if getattr(p, weights.ATTR, None) is not None:
                raise UsageError("this model's weights are already quantized: quantize once (one QuantizedWeights, "
                                 "one --quant)")
            if "forward" in p.__dict__:
                raise UsageError(f"a {type(p).__name__}'s forward is already replaced (SparseMLP, or an accelerate "
                                 "hook): enter QuantizedWeights first, the other methods inside it")
        self._done: list[nn.Module] = []

    def __enter__(self) -> "QuantizedWeights":
        x_max = None
        if self.scheme.calibrated:  # on the float model, before any projection changes
            x_max = input_maxima(self.model, self.projs, self.calibration, progress=self.progress)
        try:
            for p in self.projs:
                w = arch.weight(p)
                q = self.scheme.quantize(w) if x_max is None else self.scheme.quantize(w, x_max[p])
                setattr(p, weights.ATTR, q)
                p.forward = self.scheme.forward(q, p.bias)
                self._done.append(p)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self._done:
            del p.forward  # the class forward comes back
            delattr(p, weights.ATTR)
        self._done = []

    def nbytes(self) -> tuple[int, int]:
        """(float bytes, quantized bytes) of the projections' weights while inside."""
        full = sum(arch.weight(p).numel() * arch.weight(p).element_size() for p in self._done)
        return full, sum(getattr(p, weights.ATTR).nbytes for p in self._done)


def quantized(model: nn.Module, scheme: str | None, calibration: torch.Tensor | None = None):
    """QuantizedWeights for a scheme name (a calibrated one reads ``calibration``), or a do-nothing context for
    none ("" or None)."""
    return QuantizedWeights(model, scheme, calibration=calibration) if scheme else nullcontext()
