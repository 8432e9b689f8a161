"""RoPE scalings for context extension: each one only computes the rotary frequencies.

RoPE rotates the pair of dimensions (2j, 2j+1) of queries and keys at position m by the angle
m·θ_j, with θ_j = base^(−2j/d) over the d rotary dims. A model trained on L positions has seen
angles m·θ_j < L·θ_j only; past L the low frequencies reach angles it never saw, and attention
breaks. With s = L'/L the target extension factor:

- ``pi``           Positional Interpolation (Chen et al. 2023): θ'_j = θ_j / s, i.e. position m is
                   read as m/s — every angle back inside the trained range (needs a short fine-tune).
- ``ntk``          NTK-aware: base' = base · s^(d/(d−2)); the highest frequency is unchanged
                   (extrapolated), the lowest is divided by s (interpolated). No fine-tuning.
- ``dynamic-ntk``  NTK with the factor taken from the current length T (transformers' formula):
                   base' = base · (s·T/L − (s − 1))^(d/(d−2)) for T > L, the original RoPE for T ≤ L.
- ``yarn``         YaRN (Peng et al. 2023): per dimension, interpolate (θ_j/s) the dims that turn
                   fewer than β_slow times over L, keep those turning more than β_fast times, ramp
                   linearly in between; and scale the attention logits by (0.1·ln s + 1)², applied
                   as 0.1·ln s + 1 on both cos and sin.

Factor 1 is exactly the original RoPE for every scaling. Each scaling also names the
``rope_parameters`` entries that stand for it in a transformers config (plain dicts: no
transformers here); applying a scaling to a loaded model and exporting it into its config is
:mod:`attnlab.rope.apply`. A new scaling is a file of its own, ``rope/scaling_NAME.py`` (``scaling_yarn.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry, files


def rope_inv_freq(base: float, dim: int) -> torch.Tensor:
    """θ_j = base^(−2j/d), j < d/2: (d/2,) float32, computed as transformers does (bit-identical)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))


@dataclass(frozen=True)
class RopeScaling:
    """Base: no scaling. ``factor`` s = target context / trained context."""

    factor: float = 1.0
    name = "none"
    about = "the model's own RoPE"
    dynamic = False  # True: the frequencies depend on the current length

    def frequencies(self, base: float, dim: int, original_len: int, seq_len: int | None = None
                    ) -> tuple[torch.Tensor, float]:
        """(inv_freq (dim/2,) float32, attention factor multiplying cos and sin)."""
        return rope_inv_freq(base, dim), 1.0

    def rope_parameters(self, base: float, dim: int, original_len: int) -> dict:
        """The transformers ``rope_parameters`` entries that compute these frequencies (``dim``:
        rotary dims); a static scaling at factor 1 is the plain RoPE."""
        if self.factor == 1 and not self.dynamic:
            return {"rope_type": "default"}
        return self._rope_parameters(base, dim, original_len)

    def _rope_parameters(self, base: float, dim: int, original_len: int) -> dict:
        if self.name != "none":  # a subclass that forgot its own: never export it as the plain RoPE
            raise UsageError(f"cannot export {self.describe()} into a transformers config")
        return {"rope_type": "default"}

    def describe(self) -> str:
        return self.name if self.name == "none" else f"{self.name}(s={self.factor:g})"


@dataclass(frozen=True)
class PI(RopeScaling):
    name = "pi"
    about = "Positional Interpolation: every position read as m / factor"

    def frequencies(self, base, dim, original_len, seq_len=None):
        return rope_inv_freq(base, dim) / self.factor, 1.0

    def _rope_parameters(self, base, dim, original_len):
        return {"rope_type": "linear", "factor": self.factor}


@dataclass(frozen=True)
class NTK(RopeScaling):
    name = "ntk"
    about = "NTK-aware: the base raised so the lowest frequency is divided by factor"

    def scaled_base(self, base: float, dim: int) -> float:
        return base * self.factor ** (dim / (dim - 2))

    def frequencies(self, base, dim, original_len, seq_len=None):
        return rope_inv_freq(self.scaled_base(base, dim), dim), 1.0

    def _rope_parameters(self, base, dim, original_len):  # NTK-aware is a plain change of base
        return {"rope_type": "default", "rope_theta": self.scaled_base(base, dim)}


@dataclass(frozen=True)
class DynamicNTK(RopeScaling):
    name = "dynamic-ntk"
    about = "NTK with the factor taken from the current length"
    dynamic = True

    def frequencies(self, base, dim, original_len, seq_len=None):
        t = max(seq_len or original_len, original_len)
        if t == original_len:  # within the trained context: the original RoPE, exactly
            return rope_inv_freq(base, dim), 1.0
        alpha = self.factor * t / original_len - (self.factor - 1)
        return rope_inv_freq(base * alpha ** (dim / (dim - 2)), dim), 1.0

    def _rope_parameters(self, base, dim, original_len):
        return {"rope_type": "dynamic", "factor": self.factor}


# a new scaling is one file, attnlab/rope/scaling_NAME.py, registered by its decorator (YaRN's is the example)
SCALINGS: Registry[type[RopeScaling]] = Registry("RoPE scaling", discover=files("attnlab.rope", "scaling_"))


def register(cls: type[RopeScaling]) -> type[RopeScaling]:
    """Class decorator: the scaling becomes ``SCALINGS[cls.name]``."""
    SCALINGS.add(cls.name, cls)
    return cls


for _cls in (RopeScaling, PI, NTK, DynamicNTK):
    SCALINGS.add(_cls.name, _cls)


def beyond_trained(scaling: RopeScaling, base: float, dim: int, trained: int, length: int) -> torch.Tensor:
    """For each rotary pair that never completes a turn within ``trained`` positions (θ_j·L < 2π: its angles
    there are all it knows), how far past its largest trained angle the scaling takes it at ``length``:
    (length·θ'_j) / (L·θ_j), (k,) for those k pairs; above 1 = angles the model never saw (PI: exactly
    1 at length = s·L; no scaling: s)."""
    theta = rope_inv_freq(base, dim)
    scaled, _ = scaling.frequencies(base, dim, trained, length)
    never_turned = trained * theta < 2 * math.pi
    return (length * scaled / (trained * theta))[never_turned]


def make_scaling(name: str, factor: float = 1.0) -> RopeScaling:
    """A scaling by name; one-line errors for unknown names (with the closest) and factors below 1."""
    cls = SCALINGS.get(name)
    if not factor >= 1:
        raise UsageError(f"scaling factor {factor}: give s >= 1 (the target context over the trained one); "
                         "s < 1 would shrink the context")
    return cls(factor=float(factor))
