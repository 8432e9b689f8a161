"""Methods compared on one evaluation: the same evaluation of one model, once under each method."""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Callable, TypeVar

T = TypeVar("T")


def under_each(methods: dict[str, AbstractContextManager], evaluate: Callable[[str], T]) -> dict[str, T]:
    """{label: evaluate(label)}, each call inside its method: a context manager that alters the model
    on entry and restores it on exit (a RoPE scaling; later a KV policy or a sparse MLP)::

        under_each({s.describe(): ScaledRope(model, s) for s in scalings},
                   lambda label: long_ppl(model, ids, lengths))
    """
    out = {}
    for label, method in methods.items():
        with method:
            out[label] = evaluate(label)
    return out
