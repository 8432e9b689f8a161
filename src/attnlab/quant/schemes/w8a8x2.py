"""W8A8x2: int8 weights, each activation as two int8 slices (about 15 bits), integer products
(:mod:`attnlab.core.w8a8`): weight-only int8's precision through the W8A8 kernel."""
from attnlab.core import w8a8
from attnlab.quant.schemes import SCHEMES, Scheme

SCHEMES.add("w8a8x2", Scheme(w8a8.quantize_x2, "int8 weights, each activation as two int8 slices (about 15 bits), "
                                               "integer products"))
