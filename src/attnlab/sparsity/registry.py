"""The contextual-sparsity rules by name: the one registry that the command line, the configs, the
experiments and the tests read.

Torch-free, so that ``attnlab sparsity --help`` lists the rules and a misspelt ``--rule`` is refused
without importing PyTorch. An entry names its rule class and its builder as ``module:attribute``
strings, imported only when a rule is built: a builder may need transformers (calibration passes over
a model) or files a training run saved (Deja Vu's predictors), which the pure :mod:`~attnlab.sparsity.rules`
may not import. A builder is ``builder(rule_class, model, inputs: RuleInputs) -> (keep -> rule)``: whatever
it reads once (a calibration pass, saved files), any keep then costs nothing more.

Adding a rule: its class (with ``name`` and ``needs``, see :mod:`~attnlab.sparsity.rules`), its builder,
and one entry below; the tests parametrised over ``RULES`` then cover it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from attnlab.core.registry import Registry

# What building a rule reads: nothing (the oracle decides from h itself), a calibration text (thresholds,
# static sets) or the predictors a training run saved (``attnlab reproduce dejavu``).
READS = ("nothing", "calibration", "predictors")


def _load(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class RuleInputs:
    """What the builders read, each what its rule needs: ``calibration`` the ids (T,) of a calibration text
    (never the evaluation one) passed over in windows of ``window``; ``model`` the name the model was
    loaded by, beside whose weights predictors are looked up unless ``predictors`` names a dejavu run's
    folder; ``source`` and ``rank`` choose among saved predictors."""

    calibration: Any = None
    window: int = 512
    progress: Any = None
    model: str = ""
    predictors: str = ""
    source: str = "lookahead"
    rank: int | None = None


@dataclass(frozen=True)
class RuleKind:
    """A registered rule: ``keeps`` says what a token keeps (one line of ``--help``), ``reads`` what
    building it reads (one of READS), ``rule`` and ``builder`` where its class and builder are."""

    name: str
    keeps: str
    reads: str
    rule: str
    builder: str

    def __post_init__(self):
        if self.reads not in READS:
            raise ValueError(f"rule {self.name}: reads {self.reads!r}, not one of {READS}")

    def rule_class(self) -> type:
        return _load(self.rule)

    def build(self, model, inputs: RuleInputs) -> Callable[[float], Any]:
        """keep -> this rule at that keep, for ``model``, from what ``inputs`` give."""
        return _load(self.builder)(self.rule_class(), model, inputs)


RULES: Registry[RuleKind] = Registry("sparsity rule")
for _kind in (
    RuleKind("oracle", "per token the top-k of |h| (Deja Vu's contextual sparsity; needs h itself: an upper "
             "bound)", "nothing", "attnlab.sparsity.rules:Oracle", "attnlab.sparsity.measure:uncalibrated"),
    RuleKind("cats", "per token the neurons with |act(gate(x))| above a per-layer threshold (CATS)",
             "calibration", "attnlab.sparsity.rules:CATS", "attnlab.sparsity.measure:thresholded"),
    RuleKind("teal", "per token the channels of x entering the MLP and of h entering down_proj above "
             "per-layer thresholds (TEAL)", "calibration", "attnlab.sparsity.rules:TEAL",
             "attnlab.sparsity.measure:thresholded"),
    RuleKind("static", "the same neurons for every token: per layer the most active on average (mean |h|)",
             "calibration", "attnlab.sparsity.rules:Static", "attnlab.sparsity.measure:most_active"),
    RuleKind("predicted", "per token the top-k by Deja Vu's low-rank predictors (trained by `attnlab reproduce "
             "dejavu`) from the previous layer's MLP input (lookahead; layer 0 from its own) or the layer's own",
             "predictors", "attnlab.sparsity.predicted:Predicted", "attnlab.sparsity.predicted:saved_rules"),
):
    RULES.add(_kind.name, _kind)


def rule_names(reads: tuple[str, ...] = READS) -> list[str]:
    """The registered rules, in registration order, that read one of ``reads``."""
    return [name for name, kind in RULES.items() if kind.reads in reads]
