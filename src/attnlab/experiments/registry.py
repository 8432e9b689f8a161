"""The experiment registry: one name -> one figure, table or theorem check, listed in the talk's order.

An experiment is a config dataclass (every knob, with the paper's defaults) plus a run function
``run(cfg, ctx) -> Result``. Registering is one decorator in the experiment's own module; such
modules are found, not listed: :func:`load_all` imports every module under ``attnlab`` named
``experiments`` or ``exp_*``. Each experiment belongs to a part of the talk, read off the package
of its run function (``attnlab.kv`` -> "KV-cache policies").
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import attnlab
from attnlab.core.registry import Registry
from attnlab.experiments.claims import Claim

# The parts of the talk, in its order: package prefix -> part. A package not listed is its own
# part, named after the package, after these.
PARTS = (
    ("attnlab.theory.scansnap", "Scan&Snap"),
    ("attnlab.theory.joma", "JoMA"),
    ("attnlab.train", "real text"),
    ("attnlab.probes", "probes: inside a pretrained model"),
    ("attnlab.kv", "KV-cache policies"),
    ("attnlab.sinks", "attention sinks from scratch"),
    ("attnlab.recall", "what eviction forgets"),
    ("attnlab.rope", "RoPE scaling"),
    ("attnlab.sparsity", "contextual sparsity"),
    ("attnlab.quant", "weight quantization"),
    ("attnlab.accuracy", "downstream accuracy"),
    ("attnlab.leaderboard", "the KV leaderboard"),  # not the talk's: the field's methods compared, after it
)


@dataclass
class Result:
    """What a run returns; the runner writes it out (see :mod:`attnlab.experiments.runner`)."""

    claims: list[Claim]
    metrics: dict[str, Any] = field(default_factory=dict)  # extra keys for metrics.json
    figures: dict[str, str] = field(default_factory=dict)  # file name -> caption
    summary: str = ""  # a paragraph for report.md
    links: dict[str, str] = field(default_factory=dict)  # other files of the run to open (a page) -> what each is


@dataclass(frozen=True)
class Experiment:
    name: str
    summary: str  # one line, for `attnlab list`
    config_cls: type
    run: Callable[[Any, Any], Result]
    quick: dict[str, Any] = field(default_factory=dict)  # overrides for `attnlab demo`
    demo: bool = True  # False: too slow for the demo's few minutes even in quick mode
    part: str = ""  # the part of the talk (part_of(run's module)); "" for an ad-hoc run


EXPERIMENTS: Registry[Experiment] = Registry("experiment", "see `attnlab list`")


def part_of(module: str) -> str:
    """The part of the talk for a module path: its PARTS entry, else its package's name."""
    for prefix, part in PARTS:
        if module == prefix or module.startswith(prefix + "."):
            return part
    names = module.split(".")
    return names[1] if names[0] == "attnlab" and len(names) > 2 else ".".join(names[:-1]) or module


def register(name: str, summary: str, config: type, quick: dict[str, Any] | None = None, demo: bool = True):
    """Decorator: ``@register("scansnap-fig6", "...", Fig6Config)`` on ``run(cfg, ctx)``."""
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"{name}: config must be a dataclass")

    def wrap(fn):
        EXPERIMENTS.add(name, Experiment(name, summary, config, fn, dict(quick or {}), demo,
                                         part_of(fn.__module__)))
        return fn

    return wrap


def experiment_modules() -> list[str]:
    """Every module under ``attnlab`` that registers experiments (named ``experiments`` or ``exp_*``)."""
    found = []
    for info in pkgutil.walk_packages(attnlab.__path__, "attnlab."):
        last = info.name.rsplit(".", 1)[-1]
        if not info.ispkg and (last == "experiments" or last.startswith("exp_")):
            found.append(info.name)
    return found


def _talk_key(exp: Experiment) -> tuple:
    """Parts in the talk's order (unlisted ones after, by name); in a part, modules by their
    ``TALK_ORDER`` (a module constant, default 0), then a package's ``experiments`` module before its
    ``exp_*`` modules, those by name; in a module, registration order."""
    rank = [p for _, p in PARTS]
    part = (rank.index(exp.part), "") if exp.part in rank else (len(rank), exp.part)
    module = exp.run.__module__
    package, _, last = module.rpartition(".")
    talk_order = getattr(sys.modules.get(module), "TALK_ORDER", 0)
    return part, package, talk_order, last != "experiments", last  # sorted() is stable: registration order


def load_all() -> dict[str, Experiment]:
    """Every registered experiment, name -> experiment, in the talk's order."""
    for module in experiment_modules():
        importlib.import_module(module)
    return {e.name: e for e in sorted((e for _, e in EXPERIMENTS.items()), key=_talk_key)}


def get(name: str) -> Experiment:
    load_all()
    return EXPERIMENTS.get(name)
