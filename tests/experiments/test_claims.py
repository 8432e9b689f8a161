"""A claim with an interval: holds when the whole interval passes its test, fails when none of it does, else
unresolved -- for every test kind; NaN fails; an interval that is not one is refused."""
import math

import pytest

from attnlab.experiments.claims import TESTS, Claim, check, describe, erratum, tally

# test -> (expected, tolerance, an interval inside the accepted set, one wholly outside, one straddling its edge)
CASES = {
    "abs": (1.0, 0.1, (0.95, 1.05), (1.2, 1.3), (1.05, 1.15)),
    "rel": (2.0, 0.1, (1.9, 2.1), (2.3, 2.5), (1.7, 1.9)),
    "at_least": (0.5, 0.1, (0.45, 2.0), (0.1, 0.35), (0.3, 0.5)),
    "at_most": (0.01, 0.0, (-1.0, 0.005), (0.02, 0.05), (-0.01, 0.045)),
    "factor": (4.0, 2.0, (2.5, 7.0), (9.0, 12.0), (1.0, 3.0)),
}


def test_every_test_kind_has_a_case():
    assert set(CASES) == set(TESTS)


@pytest.mark.parametrize("test", CASES)
def test_the_interval_decides(test):
    expected, tol, inside, outside, straddling = CASES[test]
    for interval, holds, status in ((inside, True, "holds"), (outside, False, "fails"),
                                    (straddling, None, "unresolved")):
        measured = (interval[0] + interval[1]) / 2
        c = check("c", measured, expected, tol, test, interval=interval, n=50, method="paired bootstrap, 95%")
        assert (c.holds, c.status) == (holds, status), (test, interval)
        assert c.interval == interval and c.n == 50
        d = c.to_json()
        assert d["interval"] == list(interval) and d["n"] == 50 and d["method"] == "paired bootstrap, 95%"
        assert d["status"] == status and d["holds"] is holds


@pytest.mark.parametrize("test", CASES)
def test_the_interval_overrides_the_point(test):
    """A point that passes with an interval that straddles is unresolved; the point alone would hold."""
    expected, tol, inside, _, straddling = CASES[test]
    point = straddling[0] if TESTS[test][1](straddling[0], expected, tol) else straddling[1]
    assert check("c", point, expected, tol, test).holds is True
    assert check("c", point, expected, tol, test, interval=straddling, n=3).status == "unresolved"


@pytest.mark.parametrize("test", CASES)
def test_nan_fails_even_with_an_interval_inside(test):
    expected, tol, inside, *_ = CASES[test]
    c = check("c", math.nan, expected, tol, test, interval=inside, n=10)
    assert c.holds is False and c.status == "fails"


@pytest.mark.parametrize("interval, n", [((1.0, 0.5), 10), ((math.nan, 1.0), 10), ((0.0, 1.0), None),
                                         ((0.0, 1.0), 0)])
def test_a_bad_interval_is_refused(interval, n):
    with pytest.raises(ValueError, match="interval needs low <= high"):
        check("c", 0.5, 0.5, 0.1, "abs", interval=interval, n=n)


def test_a_claim_without_an_interval_keeps_its_json():
    d = check("c", 1.0, 1.0, 0.0).to_json()
    assert not {"interval", "n", "method"} & set(d) and d["status"] == "holds"


def test_unresolved_is_counted_apart_and_explained_only_when_unresolved():
    claims = [check("a", 1.0, 1.0, 0.1, interval=(0.95, 1.05), n=4),
              check("b", 1.0, 1.0, 0.1, interval=(0.8, 1.05), n=4),
              check("c", 2.0, 1.0, 0.1, interval=(1.9, 2.1), n=4)]
    counts = tally(claims)
    assert counts == {"holds": 1, "fails": 1, "unresolved": 1, "erratum": 0, "finding": 0}
    assert describe(counts) == "1/3 claims hold, 1 fail, 1 unresolved"
    assert claims[1].unresolved_because("too few items").note == "too few items"
    assert claims[0].unresolved_because("x").note is None and claims[2].unresolved_because("x").note is None


def test_an_unresolved_printed_statement_is_not_an_erratum():
    printed, corrected = check("printed", 1.0, 1.0, 0.1, interval=(0.8, 1.05), n=4), check("corrected", 1, 1, 0)
    assert [c.status for c in erratum(printed, corrected)] == ["unresolved", "holds"]
    assert Claim("x", 1.0, 1.0, 0.0, None, "abs").status == "unresolved"
