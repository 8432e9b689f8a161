"""The weight-quantization schemes by name: the one registry ``--quant``'s choices, ``--method``, validation and
the tests read. Each scheme is one module of this package (``int8.py``, ``int4.py``), found, not listed: it adds
a :class:`Scheme` whose ``quantize`` turns a weight (out, in) into an object of the weight layout protocol
(:mod:`attnlab.core.weights`). Torch only (no Hugging Face)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnlab.core.registry import Registry, files
from attnlab.core.weights import QuantForward


@dataclass(frozen=True)
class Scheme:
    quantize: Callable  # w (out, in) float [, x_max (in,)] -> the quantized weight (a weights.Layout)
    about: str = ""  # one line of --help
    forward: type = QuantForward  # forward(quantized, bias) -> callable x (..., in) -> (..., out)
    # quantize(w, x_max) also takes each input unit's max |x| over a calibration text (attnlab.quant.calibrate)
    calibrated: bool = False


# an unknown name's message lists the registered names (no hand-written list to fall behind the registry)
SCHEMES: Registry[Scheme] = Registry("weight quantization", discover=files(__name__))
