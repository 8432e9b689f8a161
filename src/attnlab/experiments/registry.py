"""The experiment registry: one name -> one figure, table or theorem check.

An experiment is a config dataclass (every knob, with the paper's defaults) plus a run
function ``run(cfg, ctx) -> Result``. Registering is one decorator in the experiment's own
module; :func:`load_all` imports those modules so the CLI sees them.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from attnlab.core.errors import UsageError
from attnlab.experiments.claims import Claim

# Modules that register experiments; later issues append theirs here.
EXPERIMENT_MODULES = (
    "attnlab.theory.scansnap.experiments",
    "attnlab.theory.joma.exp_invariants",
    "attnlab.theory.joma.exp_ode",
    "attnlab.theory.joma.exp_hierarchy",
    "attnlab.train.exp_fig7",
    "attnlab.train.exp_joma_text",
    "attnlab.kv.experiments",
    "attnlab.rope.experiments",
    "attnlab.rope.exp_pi_finetune",
)


@dataclass
class Result:
    """What a run returns; the runner writes it out (see :mod:`attnlab.experiments.runner`)."""

    claims: list[Claim]
    metrics: dict[str, Any] = field(default_factory=dict)  # extra keys for metrics.json
    figures: dict[str, str] = field(default_factory=dict)  # file name -> caption
    summary: str = ""  # a paragraph for report.md


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str  # one line, for `attnlab reproduce --list`
    config_cls: type
    run: Callable[[Any, Any], Result]
    quick: dict[str, Any] = field(default_factory=dict)  # overrides for `attnlab demo`
    demo: bool = True  # False: too slow for the demo's few minutes even in quick mode


_REGISTRY: dict[str, Experiment] = {}


def register(name: str, summary: str, config: type, quick: dict[str, Any] | None = None, demo: bool = True):
    """Decorator: ``@register("scansnap-fig6", "...", Fig6Config)`` on ``run(cfg, ctx)``."""
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"{name}: config must be a dataclass")

    def wrap(fn):
        if name in _REGISTRY:
            raise ValueError(f"experiment {name!r} registered twice")
        _REGISTRY[name] = Experiment(name, summary, config, fn, dict(quick or {}), demo)
        return fn

    return wrap


def load_all() -> dict[str, Experiment]:
    for mod in EXPERIMENT_MODULES:
        importlib.import_module(mod)
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Experiment:
    experiments = load_all()
    if name not in experiments:
        close = difflib.get_close_matches(name, experiments, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"unknown experiment {name!r}: {hint}see `attnlab reproduce --list`")
    return experiments[name]
