"""User-facing errors: the CLI turns each into one line on stderr and exit code 2.

Also the one check of a number a user gave (:func:`check_number`): every config field, ``--set``, ``--grid``
cell, command flag and method option goes through it, so that NaN (which compares false with every bound, and
so slips past ``x < lo`` checks) and infinity are refused in one place rather than per command.
"""
from __future__ import annotations

import math
import operator
from typing import Any


class UsageError(Exception):
    """Bad input that the user can fix; the message names the fix."""


class ConfigError(UsageError, ValueError):
    """An experiment or model config that cannot describe a valid run."""


class MissingResource(UsageError):
    """A corpus or model this machine lacks: ``attnlab demo`` skips experiments that need one."""


def first_line(e: Exception, default: str | None = None) -> str:
    """An exception's first line (else ``default``, else its type), short enough for a one-line error."""
    return str(e).splitlines()[0][:160] if str(e) else default or type(e).__name__


INT64 = 2**63  # the integers a tensor or an array can hold lie in [-INT64, INT64)
_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def within(x: float, bound: str) -> bool:
    """Whether ``x`` lies in ``bound``: ">= a", "> a", "<= a", "< a", or an interval "[a, b]", "(a, b)",
    "[a, b)", "(a, b]". NaN lies in none (written so that a NaN fails, not passes, each comparison)."""
    if bound[0] in "[(":
        lo, hi = (float(v) for v in bound[1:-1].split(","))
        return (lo < x if bound[0] == "(" else lo <= x) and (x < hi if bound[-1] == ")" else x <= hi)
    op, a = bound.split()
    return _COMPARE[op](x, float(a))


def _numbers(value: Any) -> list[float]:
    """The numbers in ``value`` (itself, or a tuple's or list's elements); bools, strings and None are not."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [v for v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


def check_number(name: str, value: Any, bound: str | None = None, *, finite: bool = True,
                 where: str | None = None) -> None:
    """UsageError when the number ``value`` (or any number in a tuple ``value``) is NaN or infinite (unless
    ``finite`` is False) or lies outside ``bound`` (see :func:`within`). ``name``: the setting; ``where``: how the
    user wrote it ("--budget nan", "--set factor=nan"), else ``name=value``. Anything not a number passes: reading
    the type is the parser's business."""
    numbers = _numbers(value)
    each = "each of " if isinstance(value, (tuple, list)) else ""
    where = where or f"{name}={','.join(map(str, value)) if each else value}"
    if finite and not all(isinstance(v, int) or math.isfinite(v) for v in numbers):  # an int is finite
        raise UsageError(f"{where}: give {name} {'finite numbers' if each else 'a finite number'} "
                         "(not NaN or infinity)")
    if not all(isinstance(v, float) or -INT64 <= v < INT64 for v in numbers):  # past it, torch and numpy overflow
        raise UsageError(f"{where}: {name} is out of range; give {'whole numbers' if each else 'a whole number'} "
                         "between -2**63 and 2**63")
    if bound and not all(within(v, bound) for v in numbers):
        raise UsageError(f"{where}: need {each}{name} {'in ' * (bound[0] in '[(')}{bound}")
