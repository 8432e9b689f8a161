"""Every contextual-sparsity rule as a method (kind ``mlp``): its options are the share kept, how the kept
neurons are computed, and what building the rule reads (a calibration text, or saved predictors); entered,
the MLPs keep per token only the neurons the rule chooses (:class:`~attnlab.sparsity.mlp.SparseMLP`)."""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.base import CALIBRATION, METHODS, Method, derived
from attnlab.sparsity.registry import RULES, RuleInputs

SHARED = [("keep", float, option(0.5, "share of the MLP's neurons kept per token", bounds="(0, 1]")),
          ("mode", str, option("mask", "mask (zero the rest: measures), gather (compute only the kept "
                                       "neurons: saves time) or kernel (gather, a GPU's decode step in Triton)"))]
READS = {"nothing": [],
         "calibration": CALIBRATION,
         "predictors": [("predictors", str, option("", "a dejavu run's predictors folder (default: beside the "
                                                       "model's weights)")),
                        ("source", str, option("lookahead", "lookahead (from the previous layer's MLP input) or "
                                                            "own (the layer's)")),
                        ("rank", int | None, option(None, "the predictors' rank among those saved (default: the "
                                                          "largest)", bounds=">= 1"))]}


@dataclass(frozen=True)
class SparsityMethod(Method):
    kind = "mlp"

    def check(self) -> None:
        if self.mode not in ("mask", "gather", "kernel"):
            raise UsageError(f"--method {self.name}:mode={self.mode}: choose mask, gather or kernel")

    def static_step(self) -> str | None:
        if self.mode != "mask":  # measured: the kept set's size reaches the graph, which breaks a few steps in
            return f"runs one static graph, and mode={self.mode} gathers a kept set of changing size (mode=mask runs)"
        return None

    def rule(self, model, ctx):
        """The rule at ``keep``, built as its registry entry says (calibrated on the tokenizer's encoding of
        the calibration text, or from saved predictors)."""
        kind, calib = RULES.get(self.name), None
        if kind.reads == "calibration":
            from attnlab.evals.inputs import calibration_ids  # the tokenizer's side: once a method calibrates

            calib = calibration_ids(ctx, self)
        inputs = RuleInputs(calib, 512, ctx.progress, ctx.model_name, getattr(self, "predictors", ""),
                            getattr(self, "source", "lookahead"), getattr(self, "rank", None))
        return kind.build(model, inputs)(self.keep)

    def label(self) -> str:
        return self._labelled(f"{self.name} keep {self.keep:g}", "keep")

    def enter(self, model, ctx):
        from attnlab.sparsity.mlp import SparseMLP

        return SparseMLP(model, self.rule(model, ctx), mode=self.mode)


METHODS.provide(RULES, lambda name, kind: derived(SparsityMethod, f"{name.capitalize()}Method", name, kind.keeps,
                                                 SHARED + READS[kind.reads]), "mlp")
