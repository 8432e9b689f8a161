"""YaRN (Peng et al. 2023), a RoPE scaling whose parameters are options: per rotary dimension, interpolate
(θ_j / s) the dims that turn fewer than ``beta_slow`` times over the trained context L, keep those turning more
than ``beta_fast`` times, ramp linearly between; and scale the attention logits by (0.1·ln s + 1)², applied as
0.1·ln s + 1 on both cos and sin. One file: the scaling registry finds it, and ``--method yarn:beta_fast=16``,
``--scalings yarn``, their validation, the sweeps and ``rope_parameters`` export read it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.experiments.command import option
from attnlab.rope.scalings import RopeScaling, register, rope_inv_freq


@register
@dataclass(frozen=True)
class YaRN(RopeScaling):
    beta_fast: float = option(32.0, "dims turning more than this many times over the trained context are kept "
                              "(extrapolated)", bounds="> 0")
    beta_slow: float = option(1.0, "dims turning fewer times are interpolated by the factor", bounds="> 0")
    name = "yarn"
    about = "YaRN: per dimension, interpolate the slow ones, keep the fast ones, ramp between; logits scaled"

    def frequencies(self, base, dim, original_len, seq_len=None):
        if self.factor == 1:  # the blend below is exact only up to rounding
            return rope_inv_freq(base, dim), 1.0
        wavelength = base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim)  # 1 / θ_j
        extrapolated, interpolated = 1.0 / wavelength, 1.0 / (self.factor * wavelength)
        # the dim index at which a frequency turns `rot` times over L (inverted θ_j·L = 2π·rot)
        def dim_of(rot: float) -> float:
            return dim * math.log(original_len / (rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(dim_of(self.beta_fast)), 0), min(math.ceil(dim_of(self.beta_slow)), dim - 1)
        high = high + 0.001 if high == low else high  # no division by zero when the range collapses
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: interp.
        inv = interpolated * ramp + extrapolated * (1 - ramp)
        return inv, 0.1 * math.log(self.factor) + 1.0

    def _rope_parameters(self, base, dim, original_len):
        return {"rope_type": "yarn", "factor": self.factor, "beta_fast": self.beta_fast, "beta_slow": self.beta_slow,
                "original_max_position_embeddings": original_len}
