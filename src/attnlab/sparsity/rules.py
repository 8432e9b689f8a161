"""Contextual-sparsity rules (Deja Vu's oracle, CATS, TEAL, a static set): which MLP units a token keeps.

Notation (SmolLM2 / Llama's SwiGLU MLP): x (..., d) enters the MLP, h = act(gate(x)) * up(x) (..., d_ff)
enters down_proj; h's entries are Deja Vu's "neurons". A plain MLP has h = act(in(x)) and no gate.

A rule decides, per token and layer, from what is known when it decides (its ``needs``):

    "h"       the oracle: h itself (computable only after the dense gate and up projections)
    "gate"    CATS: |act(gate(x))|, known before up_proj (for a plain MLP, act(in(x)) = h)
    "x"       TEAL: |x| entering the MLP; it sparsifies the *input channels* of gate/up (mask width d)
              and, through ``mask_h``, h entering down_proj (width d_ff)
    "static"  the same neurons for every token (``values`` is read for its shape only)
    "input"   a neuron mask (width d_ff) decided from x, before any projection: a predictor (Deja Vu)

A thresholding rule (CATS, TEAL) also names the quantities its thresholds apply to (``thresholded``:
"gate", "x", "h") and builds itself from calibrated thresholds of each (``calibrated``), so calibration
(:mod:`attnlab.sparsity.measure`) needs no rule's name. Every rule is registered by name in
:mod:`attnlab.sparsity.registry` (Deja Vu's predicted rule too, which lives in ``predicted.py``).

Pure: torch and attnlab.core only (import-linter's "pure" contract).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import torch

from attnlab.core.errors import UsageError
from attnlab.sparsity.registry import RULES

NEEDS = ("h", "gate", "x", "static", "input")


def keep_count(n: int, keep: float) -> int:
    """k = max(1, round(keep * n)) units of n; a keep fraction outside (0, 1] is a UsageError."""
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
        raise UsageError(f"keep fraction {keep}: give a number in (0, 1], e.g. 0.5")
    return max(1, min(n, round(keep * n)))


def topk_mask(scores: torch.Tensor, keep: float) -> torch.Tensor:
    """scores (..., n) -> bool (..., n): the k = keep_count(n, keep) largest of each row (ties: any k)."""
    n = scores.shape[-1]
    k = keep_count(n, keep)
    if k == n:
        return torch.ones_like(scores, dtype=torch.bool)
    idx = scores.topk(k, dim=-1).indices  # (..., k)
    return torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, idx, True)


def magnitude_threshold(samples: torch.Tensor, keep: float) -> float:
    """The |value| t such that on ``samples`` (N, n) a fraction ``keep`` of entries has |value| >= t
    (CATS / TEAL calibration). keep = 1 gives t = 0: every entry is kept on any text, not only these."""
    a = samples.detach().abs().flatten().float()  # (N * n,)
    k = keep_count(a.numel(), keep)
    if keep == 1:
        return 0.0
    return float(a.kthvalue(a.numel() - k + 1).values)  # the k-th largest |value|


class Rule(Protocol):
    """Decides which units a token keeps. ``mask(values, layer)``: values (..., n) -> bool (..., n)
    (for "static", broadcastable). Optional: ``check(layer, width)`` raises UsageError when the rule
    cannot serve that layer (no threshold for it, an index beyond its ``width`` neurons)."""

    name: str
    needs: str

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor: ...


def _per_layer(kind: str, table: dict, layer: int, keys_name: str):
    if layer not in table:
        known = ", ".join(map(str, sorted(table))) or "none"
        raise UsageError(f"{kind} has no {keys_name} for layer {layer} (it has layers {known}): "
                         f"calibrate it on this model's layers")
    return table[layer]


def _thresholds(kind: str, table: dict[int, float] | None) -> dict[int, float] | None:
    """Validated per-layer thresholds: finite, >= 0."""
    if table is None:
        return None
    out = {int(i): float(t) for i, t in table.items()}
    bad = [f"{i}: {t}" for i, t in out.items() if not (math.isfinite(t) and t >= 0)]
    if bad:
        raise UsageError(f"{kind} thresholds must be finite and >= 0 (got {', '.join(bad)})")
    return out


@dataclass(frozen=True)
class Oracle:
    """Deja Vu's oracle: per token the top-k neurons by |h| (k = keep_count(d_ff, keep))."""

    keep: float
    name: ClassVar[str] = "oracle"
    needs: ClassVar[str] = "h"

    def __post_init__(self):
        keep_count(1, self.keep)

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        return topk_mask(values.abs(), self.keep)


@dataclass(frozen=True)
class CATS:
    """CATS: keep neuron j where |act(gate(x))_j| >= t (a per-layer threshold, calibrated for ``keep``)."""

    thresholds: dict[int, float]
    keep: float | None = None  # the fraction the thresholds were calibrated for (a label)
    name: ClassVar[str] = "cats"
    needs: ClassVar[str] = "gate"
    thresholded: ClassVar[tuple[str, ...]] = ("gate",)

    def __post_init__(self):
        object.__setattr__(self, "thresholds", _thresholds("CATS", self.thresholds))

    @classmethod
    def calibrated(cls, thresholds: dict[str, dict[int, float]], keep: float) -> "CATS":
        """From per-layer thresholds of each quantity in ``thresholded``, calibrated to keep ``keep``."""
        return cls(thresholds["gate"], keep)

    def check(self, layer: int, width: int) -> None:
        _per_layer("CATS", self.thresholds, layer, "threshold")

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        return values.abs() >= _per_layer("CATS", self.thresholds, layer, "threshold")


@dataclass(frozen=True)
class TEAL:
    """TEAL: zero the input channels x_i with |x_i| < t_x (per layer) entering gate/up and, when
    ``thresholds_h`` is given, the entries of h with |h_j| < t_h entering down_proj."""

    thresholds_x: dict[int, float]
    thresholds_h: dict[int, float] | None = None
    keep: float | None = None
    name: ClassVar[str] = "teal"
    needs: ClassVar[str] = "x"
    thresholded: ClassVar[tuple[str, ...]] = ("x", "h")

    def __post_init__(self):
        object.__setattr__(self, "thresholds_x", _thresholds("TEAL", self.thresholds_x))
        object.__setattr__(self, "thresholds_h", _thresholds("TEAL", self.thresholds_h))

    @classmethod
    def calibrated(cls, thresholds: dict[str, dict[int, float]], keep: float) -> "TEAL":
        return cls(thresholds["x"], thresholds["h"], keep=keep)

    def check(self, layer: int, width: int) -> None:
        _per_layer("TEAL", self.thresholds_x, layer, "input threshold")
        if self.thresholds_h is not None:
            _per_layer("TEAL", self.thresholds_h, layer, "h threshold")

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        """x (..., d) -> bool (..., d): the input channels kept."""
        return values.abs() >= _per_layer("TEAL", self.thresholds_x, layer, "input threshold")

    def mask_h(self, values: torch.Tensor, layer: int) -> torch.Tensor | None:
        """h (..., d_ff) -> bool (..., d_ff), or None when h is not sparsified."""
        if self.thresholds_h is None:
            return None
        return values.abs() >= _per_layer("TEAL", self.thresholds_h, layer, "h threshold")


@dataclass(frozen=True)
class Static:
    """The same neurons for every token: per layer a fixed index set (e.g. the most active on average)."""

    sets: dict[int, torch.Tensor]
    keep: float | None = None
    name: ClassVar[str] = "static"
    needs: ClassVar[str] = "static"
    _masks: dict = field(default_factory=dict, repr=False, compare=False)  # (layer, n, device) -> bool (n,)

    def __post_init__(self):
        sets = {}
        for i, s in self.sets.items():
            s = torch.as_tensor(s)
            if s.dim() != 1 or s.numel() == 0 or s.dtype.is_floating_point or bool((s < 0).any()):
                raise UsageError(f"static set for layer {i}: give a non-empty 1-D tensor of neuron indices >= 0")
            sets[int(i)] = s.long()
        object.__setattr__(self, "sets", sets)

    def check(self, layer: int, width: int) -> None:
        s = _per_layer("static", self.sets, layer, "neuron set")
        if int(s.max()) >= width:
            raise UsageError(f"static set for layer {layer} has neuron {int(s.max())}, but the layer has {width} "
                             f"(0..{width - 1}): build the sets on this model")

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        """values (..., n), read for n only -> bool (1,)*(dims-1) + (n,): broadcastable."""
        n = values.shape[-1]
        key = (layer, n, values.device)
        if key not in self._masks:
            self.check(layer, n)
            m = torch.zeros(n, dtype=torch.bool, device=values.device)
            self._masks[key] = m.index_fill_(0, self.sets[layer].to(values.device), True)
        return self._masks[key].view(*(1,) * (values.dim() - 1), n)


def make_rule(name: str, *args, **kwargs) -> Rule:
    """A rule by its registered name (``make_rule("oracle", 0.5)``), from its arguments; an unknown name
    is one line with the closest. (To build one from a calibration text or saved predictors:
    ``RULES.get(name).build(model, inputs)(keep)``.)"""
    return RULES.get(name).rule_class()(*args, **kwargs)
