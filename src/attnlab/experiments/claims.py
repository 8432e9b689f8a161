"""Claims: theorem predictions and published statements, measured, each with a status.

Every experiment reports its claims in ``metrics.json`` as ``{"claim", "measured", "expected",
"tolerance", "holds", "test", "rule", "status"}``. ``status`` is one of

- ``holds`` / ``fails``: a prediction checked by a named ``test`` (``rule`` spells it out, so a
  reader can recompute ``holds`` from the other fields);
- ``erratum``: a statement of the source that is wrong *as printed*; it always travels with its
  corrected claim (``corrected`` names it), which holds or fails on its own;
- ``unresolved``: a checked claim whose measurement carries an interval (``interval``: its low and high
  ends, over ``n`` items or seeds) that straddles the tolerance: some values in it pass the test and some
  fail, so the data support neither verdict (``holds`` is null);
- ``finding``: a measured quantity reported without an expectation (``holds`` is null).

An erratum is not a failure, and a failure is never hidden: :func:`tally` counts them apart.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

STATUSES = ("holds", "fails", "unresolved", "erratum", "finding")
DECIDED = ("holds", "fails", "unresolved")  # the statuses of a checked claim (made with check())

# test name -> (rule as text, predicate(measured, expected, tolerance))
TESTS = {
    "abs": ("|measured - expected| <= tolerance", lambda m, e, t: abs(m - e) <= t),
    "rel": ("|measured - expected| <= tolerance * |expected|", lambda m, e, t: abs(m - e) <= t * abs(e)),
    "at_least": ("measured >= expected - tolerance", lambda m, e, t: m >= e - t),
    "at_most": ("measured <= expected + tolerance", lambda m, e, t: m <= e + t),
    "factor": ("expected / tolerance <= measured <= expected * tolerance", lambda m, e, t: e / t <= m <= e * t),
}

# test name -> the set of passing values as one closed interval (low, high): an interval of measurements
# holds when it lies inside, fails when it lies wholly outside, and is unresolved otherwise
ACCEPTED = {
    "abs": lambda e, t: (e - t, e + t),
    "rel": lambda e, t: (e - t * abs(e), e + t * abs(e)),
    "at_least": lambda e, t: (e - t, math.inf),
    "at_most": lambda e, t: (-math.inf, e + t),
    "factor": lambda e, t: (e / t, e * t),
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
    interval: tuple[float, float] | None = None  # the measurement's confidence interval (low, high)
    n: int | None = None  # how many items (seeds, samples) the interval is over
    method: str | None = None  # how the interval was obtained ("paired bootstrap, 95%", "exact", ...)

    def __post_init__(self):
        if not self.status:  # a checked claim: its status follows from holds
            object.__setattr__(self, "status", "unresolved" if self.holds is None else
                               "holds" if self.holds else "fails")
        if self.status not in STATUSES:
            raise ValueError(f"unknown claim status {self.status!r}; one of {STATUSES}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["rule"] = TESTS[self.test][0] if self.test else None
        if d["interval"] is not None:
            d["interval"] = list(d["interval"])
        for key in ("corrected", "note", "interval", "n", "method"):  # optional keys appear only when set
            if d[key] is None:
                del d[key]
        return d

    def because(self, note: str) -> "Claim":
        """The same claim with an explanation attached (``check(...).because("...")``)."""
        return replace(self, note=note)

    def failing_because(self, note: str) -> "Claim":
        """:meth:`because` for a claim that fails; one that holds needs no explanation and is returned as it is."""
        return self.because(note) if self.status == "fails" else self

    def unresolved_because(self, note: str) -> "Claim":
        """:meth:`because` for a claim its interval leaves undecided; a decided one is returned as it is."""
        return self.because(note) if self.status == "unresolved" else self


def check(claim: str, measured: float, expected: float, tolerance: float = 0.0, test: str = "abs",
          interval: tuple[float, float] | None = None, n: int | None = None, method: str | None = None) -> Claim:
    """Build a :class:`Claim`, deciding ``holds`` by the named test. NaN never holds.

    With an ``interval`` (low, high) around ``measured`` (over ``n`` items, obtained by ``method``) the
    interval decides: it holds when every value in it passes, fails when none does, else it is unresolved.
    """
    if test not in TESTS:
        raise ValueError(f"unknown claim test {test!r}; one of {sorted(TESTS)}")
    measured, expected, tolerance = float(measured), float(expected), float(tolerance)
    if interval is None:
        holds = not math.isnan(measured) and bool(TESTS[test][1](measured, expected, tolerance))
        return Claim(claim, measured, expected, tolerance, holds, test)
    lo, hi = float(interval[0]), float(interval[1])
    if not (lo <= hi) or n is None or n < 1:
        raise ValueError(f"an interval needs low <= high and its n >= 1 (got {interval}, n={n})")
    a, b = ACCEPTED[test](expected, tolerance)
    if math.isnan(measured):
        holds = False
    elif a <= lo and hi <= b:
        holds = True
    elif hi < a or lo > b:
        holds = False
    else:
        holds = None  # the interval straddles the tolerance
    return Claim(claim, measured, expected, tolerance, holds, test, interval=(lo, hi), n=int(n), method=method)


def undecided(c: Claim, note: str) -> Claim:
    """A checked claim whose run cannot decide it (a quick run's scale, a control that did not learn the task):
    unresolved, with why; a finding or erratum is returned as it is."""
    if c.status not in DECIDED:
        return c
    return replace(c, holds=None, status="unresolved", note=note)


def finding(claim: str, measured: float) -> Claim:
    """A measured quantity reported without an expectation."""
    return Claim(claim, float(measured), None, None, None, None, "finding")


def erratum(as_printed: Claim, corrected: Claim) -> list[Claim]:
    """The source's statement checked as printed, then its correction.

    If the printed statement fails, it is marked ``erratum`` (pointing at ``corrected``); if it
    holds after all, it stays an ordinary claim that holds -- the data decide, not the label.
    """
    if as_printed.status not in DECIDED or corrected.status not in DECIDED:
        raise ValueError("an erratum pairs two checked claims (made with check())")
    if as_printed.holds is not False:  # holds, or undecided: only a printed statement that fails is an erratum
        return [as_printed, corrected]
    return [replace(as_printed, status="erratum", corrected=corrected.claim), corrected]


def tally(claims) -> dict[str, int]:
    """How many claims hold, fail, are unresolved, errata and findings: five separate counts."""
    counts = dict.fromkeys(STATUSES, 0)
    for c in claims:
        counts[c.status] += 1
    return counts


def describe(counts: dict[str, int]) -> str:
    """'5/9 claims hold, 3 fail, 1 unresolved, 1 erratum, 2 findings' (checked claims only in the fraction)."""
    unresolved = counts.get("unresolved", 0)
    checked = counts["holds"] + counts["fails"] + unresolved
    parts = [f"{counts['holds']}/{checked} claims hold"]
    if counts["fails"]:
        parts.append(f"{counts['fails']} fail")
    if unresolved:
        parts.append(f"{unresolved} unresolved")
    if counts["erratum"]:
        parts.append(f"{counts['erratum']} erratum" + ("" if counts["erratum"] == 1 else "s"))
    if counts["finding"]:
        parts.append(f"{counts['finding']} finding" + ("" if counts["finding"] == 1 else "s"))
    return ", ".join(parts)
