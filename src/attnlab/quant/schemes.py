"""The weight-quantization schemes by name: the one registry ``--quant``'s choices, its validation and the
tests read. Torch only (no Hugging Face): a scheme turns a weight into what its forward reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnlab.core import int8
from attnlab.core.registry import Registry


@dataclass(frozen=True)
class Scheme:
    quantize: Callable  # w (out, in) float -> the quantized weight
    forward: type  # forward(quantized, bias) -> callable x (..., in) -> (..., out)
    about: str = ""  # one line of --help


# an unknown name's message lists the registered names (no hand-written list to fall behind the registry)
SCHEMES: Registry[Scheme] = Registry("weight quantization")
# weight-only int8, one bf16 scale per output channel, bf16 activations into PyTorch's int8 kernel
SCHEMES.add("int8", Scheme(int8.quantize, int8.Int8Forward, "weight-only int8, one scale per output channel"))
