"""The one stack: methods of any kinds entered on one model, in the one order, and the model restored on exit.

    with attnlab.apply(model, "int8", "yarn:factor=2", "cats:keep=0.5", "h2o:budget=0.2"):
        out = model.generate(ids, max_new_tokens=32)      # through an H2O cache, on int8 weights, ...

This is the only place the nesting order is written (:data:`attnlab.methods.base.KINDS`); a kind takes one
method at a time (two weight schemes, two RoPE scalings, two sparsity rules or two KV policies are refused
in one line). Each method's own context manager restores what it changed; the stack exits them in reverse.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

from attnlab.core.errors import UsageError
from attnlab.methods.base import KIND_NAMES, KINDS, Context, Method, parse


def ordered(methods: list[Method | str]) -> list[Method]:
    """``methods`` (objects or specs) in the stack's order; two of one kind refused in one line."""
    ms = [parse(m) if isinstance(m, str) else m for m in methods]
    for kind in KINDS:
        same = [m.spec() for m in ms if m.kind == kind]
        if len(same) > 1:
            raise UsageError(f"methods {' and '.join(same)}: a model takes one {KIND_NAMES[kind]} at a time; "
                             "drop one")
    return sorted(ms, key=lambda m: KINDS.index(m.kind))


@dataclass
class Applied:
    """What the stack entered, in its order, and each method's handle (what its ``enter`` returned)."""

    methods: list[Method]
    handles: list = field(default_factory=list)

    def handle(self, kind: str):
        """The handle of the method of ``kind`` (None: none entered)."""
        return next((h for m, h in zip(self.methods, self.handles) if m.kind == kind), None)

    def spec(self) -> str:
        """The methods as one ``;``-joined spec (``dense`` for none): a run's row name."""
        return ";".join(m.spec() for m in self.methods) or "dense"


@contextlib.contextmanager
def apply(model, *methods: Method | str, tokenizer=None, ctx: Context | None = None) -> Iterator[Applied]:
    """Enter ``methods`` (Method objects or ``NAME[:key=value,...]`` specs) on ``model`` in the one order;
    restore it on exit, also when the body raises. ``tokenizer``: what a rule that calibrates on a text
    encodes it with (``ctx`` gives more: the device, a progress factory, the model's name)."""
    ms = ordered(list(methods))
    for m in ms:
        m.check()
    ctx = ctx or Context(tokenizer=tokenizer, device=str(next(model.parameters()).device))
    applied = Applied(ms)
    with contextlib.ExitStack() as stack:
        for m in ms:
            applied.handles.append(stack.enter_context(m.enter(model, ctx)))
        yield applied
