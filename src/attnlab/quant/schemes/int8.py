"""Weight-only int8, one bf16 scale per output channel, bf16 activations into PyTorch's int8 kernel
(:mod:`attnlab.core.int8`)."""
from attnlab.core import int8
from attnlab.quant.schemes import SCHEMES, Scheme

SCHEMES.add("int8", Scheme(int8.quantize, "weight-only int8, one scale per output channel"))
