"""SmoothQuant: W8A8 whose activation outliers are moved into the weights first (:mod:`attnlab.core.w8a8`),
calibrated on a text (each input unit's max |x|)."""
from attnlab.core import w8a8
from attnlab.quant.schemes import SCHEMES, Scheme

SCHEMES.add("smoothquant", Scheme(w8a8.smoothquant, "w8a8 with SmoothQuant's smoothing (alpha 0.5), calibrated on a "
                                                    "text", calibrated=True))
