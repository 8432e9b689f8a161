"""A claim: one theorem prediction or published trend, measured against what was expected.

Every experiment reports its claims in ``metrics.json`` as
``{"claim", "measured", "expected", "tolerance", "holds", "test"}``; ``test`` says how
``holds`` was decided, so a reader can recompute it from the other fields.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# test name -> (rule as text, predicate(measured, expected, tolerance))
TESTS = {
    "abs": ("|measured - expected| <= tolerance", lambda m, e, t: abs(m - e) <= t),
    "rel": ("|measured - expected| <= tolerance * |expected|", lambda m, e, t: abs(m - e) <= t * abs(e)),
    "at_least": ("measured >= expected - tolerance", lambda m, e, t: m >= e - t),
    "at_most": ("measured <= expected + tolerance", lambda m, e, t: m <= e + t),
    "factor": ("expected / tolerance <= measured <= expected * tolerance", lambda m, e, t: e / t <= m <= e * t),
}


@dataclass(frozen=True)
class Claim:
    claim: str
    measured: float
    expected: float
    tolerance: float
    holds: bool
    test: str

    def to_json(self) -> dict:
        d = asdict(self)
        d["rule"] = TESTS[self.test][0]
        return d


def check(claim: str, measured: float, expected: float, tolerance: float = 0.0, test: str = "abs") -> Claim:
    """Build a :class:`Claim`, deciding ``holds`` by the named test. NaN never holds."""
    if test not in TESTS:
        raise ValueError(f"unknown claim test {test!r}; one of {sorted(TESTS)}")
    measured, expected, tolerance = float(measured), float(expected), float(tolerance)
    holds = not math.isnan(measured) and bool(TESTS[test][1](measured, expected, tolerance))
    return Claim(claim, measured, expected, tolerance, holds, test)
