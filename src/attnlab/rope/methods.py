"""Every RoPE scaling as a method (kind ``rope``): its options are the scaling's fields (``factor``, and YaRN's
``beta_fast`` / ``beta_slow``); entered, the model's rotary frequencies are the scaled ones
(:class:`~attnlab.rope.apply.ScaledRope`), its own again on exit."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from attnlab.experiments.command import option
from attnlab.methods.base import METHODS, Method, derived
from attnlab.rope.scalings import SCALINGS, RopeScaling

FACTOR = option(2.0, "the target context over the trained one (s >= 1)", bounds=">= 1")


@dataclass(frozen=True)
class RopeMethod(Method):
    kind = "rope"

    def scaling(self) -> RopeScaling:
        return SCALINGS.get(self.name)(**{f.name: getattr(self, f.name) for f in self.options()})

    def label(self) -> str:
        return self._labelled(f"{self.name} x{self.factor:g}", "factor")

    def static_step(self) -> str | None:
        if self.scaling().dynamic:  # measured: one recompile a step until torch's limit, then eager
            return f"compiles one graph for every length, and {self.name}'s frequencies follow the length"
        return None

    def enter(self, model, ctx):
        from attnlab.rope.apply import ScaledRope  # transformers' config: only once a model runs

        return ScaledRope(model, self.scaling())


def _options(scaling: type[RopeScaling]) -> list[tuple]:
    hints = typing.get_type_hints(scaling)
    return [(f.name, hints[f.name], FACTOR if f.name == "factor" else dataclasses.field(
        default=f.default, metadata=f.metadata)) for f in dataclasses.fields(scaling) if f.init]


# the model's own RoPE ("none") is no method: --method leaves it out
METHODS.provide(SCALINGS, lambda name, scaling: None if name == "none" else derived(
    RopeMethod, f"{scaling.__name__}Method", name, scaling.about, _options(scaling)), "rope")
