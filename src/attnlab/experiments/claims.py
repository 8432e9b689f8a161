"""Claims: theorem predictions and published statements, measured, each with a status.

Every experiment reports its claims in ``metrics.json`` as ``{"claim", "measured", "expected",
"tolerance", "holds", "test", "rule", "status"}``. ``status`` is one of

- ``holds`` / ``fails``: a prediction checked by a named ``test`` (``rule`` spells it out, so a
  reader can recompute ``holds`` from the other fields);
- ``erratum``: a statement of the source that is wrong *as printed*; it always travels with its
  corrected claim (``corrected`` names it), which holds or fails on its own;
- ``finding``: a measured quantity reported without an expectation (``holds`` is null).

An erratum is not a failure, and a failure is never hidden: :func:`tally` counts them apart.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

STATUSES = ("holds", "fails", "erratum", "finding")

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
    expected: float | None
    tolerance: float | None
    holds: bool | None  # None for a finding
    test: str | None
    status: str = ""
    corrected: str | None = None  # an erratum's corrected claim (its text)
    note: str | None = None  # why it fails (or what it means), shown beside the claim in reports

    def __post_init__(self):
        if not self.status:  # a checked claim: its status follows from holds
            object.__setattr__(self, "status", "holds" if self.holds else "fails")
        if self.status not in STATUSES:
            raise ValueError(f"unknown claim status {self.status!r}; one of {STATUSES}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["rule"] = TESTS[self.test][0] if self.test else None
        for key in ("corrected", "note"):  # optional keys appear only when set
            if d[key] is None:
                del d[key]
        return d

    def because(self, note: str) -> "Claim":
        """The same claim with an explanation attached (``check(...).because("...")``)."""
        return replace(self, note=note)

    def failing_because(self, note: str) -> "Claim":
        """:meth:`because` for a claim that fails; one that holds needs no explanation and is returned as it is."""
        return self.because(note) if self.status == "fails" else self


def check(claim: str, measured: float, expected: float, tolerance: float = 0.0, test: str = "abs") -> Claim:
    """Build a :class:`Claim`, deciding ``holds`` by the named test. NaN never holds."""
    if test not in TESTS:
        raise ValueError(f"unknown claim test {test!r}; one of {sorted(TESTS)}")
    measured, expected, tolerance = float(measured), float(expected), float(tolerance)
    holds = not math.isnan(measured) and bool(TESTS[test][1](measured, expected, tolerance))
    return Claim(claim, measured, expected, tolerance, holds, test)


def finding(claim: str, measured: float) -> Claim:
    """A measured quantity reported without an expectation."""
    return Claim(claim, float(measured), None, None, None, None, "finding")


def erratum(as_printed: Claim, corrected: Claim) -> list[Claim]:
    """The source's statement checked as printed, then its correction.

    If the printed statement fails, it is marked ``erratum`` (pointing at ``corrected``); if it
    holds after all, it stays an ordinary claim that holds -- the data decide, not the label.
    """
    if as_printed.status not in ("holds", "fails") or corrected.status not in ("holds", "fails"):
        raise ValueError("an erratum pairs two checked claims (made with check())")
    if as_printed.holds:
        return [as_printed, corrected]
    return [replace(as_printed, status="erratum", corrected=corrected.claim), corrected]


def tally(claims) -> dict[str, int]:
    """How many claims hold, fail, are errata and findings: four separate counts."""
    counts = dict.fromkeys(STATUSES, 0)
    for c in claims:
        counts[c.status] += 1
    return counts


def describe(counts: dict[str, int]) -> str:
    """'5/8 claims hold, 3 fail, 1 erratum, 2 findings' (checked claims only in the fraction)."""
    checked = counts["holds"] + counts["fails"]
    parts = [f"{counts['holds']}/{checked} claims hold"]
    if counts["fails"]:
        parts.append(f"{counts['fails']} fail")
    if counts["erratum"]:
        parts.append(f"{counts['erratum']} erratum" + ("" if counts["erratum"] == 1 else "s"))
    if counts["finding"]:
        parts.append(f"{counts['finding']} finding" + ("" if counts["finding"] == 1 else "s"))
    return ", ".join(parts)
