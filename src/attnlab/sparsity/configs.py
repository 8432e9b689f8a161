"""The config of ``attnlab sparsity``, torch-free: the command's flags are built from it
(:mod:`attnlab.experiments.command`), and a run's config.json is one of it. The rules it names are the
registry's (:mod:`attnlab.sparsity.registry`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.base import CALIBRATION_TEXT, CALIBRATION_TOKENS
from attnlab.methods.configured import QUANT, WEIGHTS_AND_ROPE, configured, methods_option
from attnlab.sparsity.registry import RULES, rule_names

# why a sparsity study takes only weight schemes and RoPE scalings (WEIGHTS_AND_ROPE): its windows are scored in
# one forward each, with no KV cache to evict from, and its MLP rules are what it compares
UNDER_WHY = ("it measures its own MLP rules in windows scored in one forward each (no KV cache): give a weight scheme "
             "or a RoPE scaling")
CALIBRATED = ", ".join(rule_names(("calibration",)))  # the rules built from a calibration text
PREDICTED = " or ".join(rule_names(("predictors",)))  # the rules read from saved predictors


def _sources() -> list[str]:
    from attnlab.sparsity.predictors import SOURCES

    return list(SOURCES)


@dataclass(frozen=True)
class SparsityRun:
    """One ``attnlab sparsity`` run: a model measured with one rule at one keep fraction."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    rule: str = option("oracle", "which MLP neurons a token keeps: {choices} (see rules below)", choices=RULES.names)
    keep: float = option(0.5, "share of MLP neurons kept per token, in (0, 1]")
    heads_keep: float | None = option(None, "also keep only this share of attention heads per token, in (0, 1]")
    text: str = option("wikitext-2/test.txt", "evaluation text: a file, or wikitext-2/test.txt / kjv / war-and-peace")
    calibration: str = option(CALIBRATION_TEXT, f"calibration text of the rules built from one ({CALIBRATED})")
    tokens: int = option(2048, "evaluation tokens")
    calibration_tokens: int = option(CALIBRATION_TOKENS, "calibration tokens")
    window: int = option(512, "tokens per forward; each window is scored on its own")
    speed: bool = option(False, "also time greedy decoding at batch 1, dense vs the MLPs on the kept neurons only "
                         "(a rule that reads the dense h to choose, as the oracle does, pays for that h first: its "
                         "speed is not a real saving; the other rules choose before the rows they skip)")
    speed_steps: int = option(32, "timed greedy decode steps for --speed")
    predictors: str = option("", f"--rule {PREDICTED}: a dejavu run's predictors folder (with own/ and lookahead/); "
                             "default: those saved beside the model for --keep (train them with `attnlab reproduce "
                             "dejavu`)", metavar="DIR")
    predictor_source: str = option("lookahead", f"--rule {PREDICTED}: predict layer i from its own MLP input or from "
                                   "layer i-1's (lookahead): {choices}", choices=_sources)
    predictor_rank: int | None = option(None, f"--rule {PREDICTED}, beside the model: the predictors' rank r, where "
                                        "several are saved", metavar="R")
    methods: tuple[str, ...] = methods_option()

    ALIASES: ClassVar = (QUANT,)
    METHOD_KINDS: ClassVar = WEIGHTS_AND_ROPE
    METHOD_WHY: ClassVar = "sparsity: " + UNDER_WHY + " (its rule is --rule, --keep)"

    def __post_init__(self):
        from attnlab.sparsity.rules import keep_count

        kind = RULES.get(self.rule)  # an unknown rule: did you mean
        configured(self)  # an unknown method or option, one of a kind it cannot apply: one line, before the model
        keep_count(1, self.keep)
        if kind.reads != "predictors" and (self.predictors or self.predictor_rank is not None):
            raise UsageError(f"--predictors and --predictor-rank are for --rule {PREDICTED}")
        if self.predictor_source not in _sources():
            raise UsageError(f"--predictor-source {self.predictor_source}: invalid choice: {self.predictor_source!r}; "
                             f"choose {' or '.join(_sources())}")
        if self.predictor_rank is not None and self.predictor_rank < 1:
            raise UsageError(f"--predictor-rank {self.predictor_rank}: give the rank r the predictors were "
                             "trained with (e.g. 128)")
        if self.heads_keep is not None:
            keep_count(1, self.heads_keep)
        for flag, n in (("--tokens", self.tokens), ("--calibration-tokens", self.calibration_tokens),
                        ("--window", self.window)):
            if n < 2:
                raise UsageError(f"{flag} {n}: give at least 2 tokens")
        if self.speed_steps < 1:
            raise UsageError(f"--speed-steps {self.speed_steps}: give at least 1 timed decode step")
