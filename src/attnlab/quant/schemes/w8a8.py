"""W8A8: int8 weights and int8 activations (one scale per token), integer products (:mod:`attnlab.core.w8a8`)."""
from attnlab.core import w8a8
from attnlab.quant.schemes import SCHEMES, Scheme

SCHEMES.add("w8a8", Scheme(w8a8.quantize, "int8 weights and int8 activations (a scale per token), integer products"))
