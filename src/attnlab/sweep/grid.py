"""A sweep's cells: the product of its grid axes and seeds, each an ordinary run's ``--set`` overrides.

``--grid key=v1,v2`` is one axis (``key`` a config key, as ``--set`` takes it). A key whose value is
itself a list (a tuple setting such as ``lengths``) takes its values separated by ``;`` instead:
``--grid "lengths=1024,2048;4096"`` is two cells, ``lengths=1024,2048`` and ``lengths=4096``; any
other key may use ``;`` too (``--grid "policy=sinks;h2o"``).
``--seeds N`` adds the axis ``seed=0..N-1`` for an experiment with one ``seed``; an experiment that
batches its own seeds (``seeds``, e.g. Fig. 6) gets ``seeds=N`` in every cell instead.

A cell is named by its axis values, in axis order (``budget=256,seed=0``); its folder name is the
same text made safe for any file system. Nothing here imports Ray or runs anything.
"""
from __future__ import annotations

import itertools
import re
import typing
from dataclasses import dataclass, field

from attnlab.core.errors import UsageError
from attnlab.experiments import config as config_mod


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: its axis values (in axis order) on top of the sweep's fixed ``--set``s."""

    axes: tuple[tuple[str, str], ...]
    fixed: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.axes) or "default"

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9._=,+-]", "_", self.name)[:200]

    @property
    def overrides(self) -> dict[str, str]:
        return {**dict(self.fixed), **dict(self.axes)}


@dataclass(frozen=True)
class Grid:
    """What a sweep runs: the experiment, its fixed overrides, the axes and how seeds enter."""

    experiment: str
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    fixed: tuple[tuple[str, str], ...] = ()
    quick: bool = False
    seeds_each: int | None = field(default=None)  # `seeds=N` passed to every cell (experiments that batch seeds)

    @property
    def every_cell(self) -> tuple[tuple[str, str], ...]:
        """The settings every cell shares: the fixed ``--set``s and, where passed through, ``seeds=N``."""
        return self.fixed + ((("seeds", str(self.seeds_each)),) if self.seeds_each else ())

    def cells(self) -> list[Cell]:
        keys = [k for k, _ in self.axes]
        return [Cell(tuple(zip(keys, values)), self.every_cell)
                for values in itertools.product(*(v for _, v in self.axes))]

    def to_json(self) -> dict:
        return {"experiment": self.experiment, "axes": {k: list(v) for k, v in self.axes},
                "fixed": dict(self.fixed), "quick": self.quick, "seeds_each": self.seeds_each}


def parse_axis(text: str, keys: dict[str, typing.Any]) -> tuple[str, tuple[str, ...]]:
    """``key=v1,v2`` (``;`` between values of a list-valued key) -> (key, values); one-line errors."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--grid {text!r}: write KEY=V1,V2, e.g. --grid budget=256,512")
    if key not in keys:
        raise UsageError(f"--grid {key}: unknown config key; {config_mod.did_you_mean(key, keys)}keys are: "
                         f"{', '.join(keys)}")
    # a list-valued key's values hold commas themselves; any key may separate its values with ";"
    sep_values = ";" if typing.get_origin(keys[key]) is tuple or ";" in values else ","
    items = tuple(v.strip() for v in values.split(sep_values) if v.strip())
    if not items:
        raise UsageError(f"--grid {text!r}: the axis {key} is empty; give at least one value, e.g. {key}=V1,V2")
    if len(set(items)) < len(items):
        raise UsageError(f"--grid {text!r}: a value appears twice on the axis {key}")
    return key, items


def make_grid(experiment: str, config_cls: type, axes: list[str], sets: dict[str, str], seeds: int | None,
              quick: bool) -> Grid:
    """The grid of ``attnlab sweep``: axes parsed against the experiment's config keys, seeds placed."""
    keys = config_mod.field_types(config_cls) | config_mod.alias_keys(config_cls)  # --grid policy=... still reads
    parsed = [parse_axis(a, keys) for a in axes]
    names = [k for k, _ in parsed]
    twice = sorted({k for k in names if names.count(k) > 1} | (set(names) & set(sets)))
    if twice:
        raise UsageError(f"{', '.join(twice)}: each key is either one --grid axis or a --set, not both or twice")
    seeds_each = None
    if seeds is not None:
        if seeds < 1:
            raise UsageError(f"--seeds {seeds}: use at least 1")
        if "seed" in keys and "seed" not in names:
            parsed.append(("seed", tuple(str(s) for s in range(seeds))))
        elif "seeds" in keys:
            seeds_each = seeds
        else:
            raise UsageError(f"{experiment} has no seed to vary: drop --seeds (it is deterministic)")
    if not parsed:
        raise UsageError("a sweep needs at least one --grid KEY=V1,V2 axis (or --seeds N)")
    return Grid(experiment, tuple(parsed), tuple(sorted(sets.items())), quick, seeds_each)
