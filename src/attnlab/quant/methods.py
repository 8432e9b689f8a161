"""Every weight scheme as a method (kind ``weights``): entered, the model's projections compute from the
quantized weights (:class:`~attnlab.quant.transform.QuantizedWeights`); the float weights are never touched."""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.experiments.command import option
from attnlab.methods.base import METHODS, Method, derived
from attnlab.quant.schemes import SCHEMES


@dataclass(frozen=True)
class WeightsMethod(Method):
    kind = "weights"

    def enter(self, model, ctx):
        from attnlab.quant.transform import QuantizedWeights

        return QuantizedWeights(model, self.name, lm_head=self.lm_head)


LM_HEAD = ("lm_head", bool, option(True, "quantize the LM head too"))
METHODS.provide(SCHEMES, lambda name, scheme: derived(WeightsMethod, f"{name.capitalize()}Method", name, scheme.about,
                                                     [LM_HEAD]), "weights")
