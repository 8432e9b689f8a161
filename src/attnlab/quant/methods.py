"""Every weight scheme as a method (kind ``weights``): entered, the model's projections compute from the
quantized weights (:class:`~attnlab.quant.transform.QuantizedWeights`); the float weights are never touched."""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.experiments.command import option
from attnlab.methods.base import CALIBRATION, METHODS, Method, derived
from attnlab.quant.schemes import SCHEMES


@dataclass(frozen=True)
class WeightsMethod(Method):
    kind = "weights"

    def enter(self, model, ctx):
        from attnlab.quant.transform import QuantizedWeights

        calib = None
        if SCHEMES.get(self.name).calibrated:  # SmoothQuant: the float model's input maxima on a text
            from attnlab.evals.inputs import calibration_ids  # the tokenizer's side: once a method calibrates

            calib = calibration_ids(ctx, self)
        return QuantizedWeights(model, self.name, lm_head=self.lm_head, calibration=calib, progress=ctx.progress)


LM_HEAD = ("lm_head", bool, option(True, "quantize the LM head too"))
METHODS.provide(SCHEMES, lambda name, scheme: derived(WeightsMethod, f"{name.capitalize()}Method", name, scheme.about,
                                                     [LM_HEAD] + (CALIBRATION if scheme.calibrated else [])),
                "weights")
