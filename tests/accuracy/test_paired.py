"""Two accuracy-table rows compared on the same items: the paired interval, the claim it decides, and how
many items would settle one (torch-free; the end-to-end run on a tiny model is in test_table.py)."""
import math

import numpy as np
import pytest

from attnlab.accuracy.paired import METHOD, items_to_resolve, paired, paired_check


def _row(**tasks) -> dict:
    """A table row from each task's per-item correctness (a 0/1 list), acc its mean."""
    return {"tasks": {t: {"correct": "".join(map(str, c)), "acc": sum(c) / len(c)} for t, c in tasks.items()}}


def _items(n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).random(n) < 0.6]


def test_a_row_against_itself_is_a_point_at_zero():
    row = _row(copa=_items(100, 0), piqa=_items(80, 1))
    p = paired({"dense": row, "same": row}, "dense", "same", ["copa", "piqa"])
    assert p.interval == (0.0, 0.0) and p.discordance == 0 and p.n == 180
    c = paired_check("same within 1 point", 0.0, 0.01, 1e-9, "at_most", p)
    assert c.status == "holds" and c.interval == (0.0, 0.0) and c.n == 180 and c.method == METHOD
    assert "agree on every one of the 180 items" in c.note


def test_the_interval_is_paired():
    """One item of 100 flips: the rows' accuracies differ by 1 point on a task whose items' spread alone
    (unpaired, sqrt(2 x 0.6 x 0.4 / 100) ~ 7 points) would give an interval of about +-14 points."""
    copa, piqa = _items(100, 0), _items(100, 1)
    copa[copa.index(1)] = 0  # the method misses one item dense gets right
    table = {"dense": _row(copa=_items(100, 0), piqa=piqa), "m": _row(copa=copa, piqa=piqa)}
    p = paired(table, "dense", "m", ["copa", "piqa"], seed=3)
    assert 0 <= p.interval[0] and p.interval[1] <= 0.03  # every resample's difference: >= 0, a few items at most
    assert p.discordance == pytest.approx(1 / 200)
    assert paired(table, "dense", "m", ["copa", "piqa"], seed=3) == p  # seeded


@pytest.mark.parametrize("flips, status", [(0, "holds"), (30, "fails"), (3, "unresolved")])
def test_the_claim_follows_its_interval(flips, status):
    """dense - method <= 0.01 over 200 items: no difference holds, 30 items lost fails, and 3 lost of 200
    (1.5 points, an interval from about 0 to 3) is unresolved -- where the point alone would fail."""
    dense = _items(200, 5)
    method = list(dense)
    for i in [i for i, x in enumerate(dense) if x][:flips]:
        method[i] = 0
    p = paired({"dense": _row(copa=dense), "m": _row(copa=method)}, "dense", "m", ["copa"])
    measured = (sum(dense) - sum(method)) / 200
    c = paired_check("m within 1 point of dense", measured, 0.01, 1e-9, "at_most", p)
    lo, hi = p.interval
    assert c.status == status and c.interval == p.interval and c.n == 200
    assert (hi <= 0.01 + 1e-9) == (status == "holds") and (lo > 0.01 + 1e-9) == (status == "fails")
    if status == "unresolved":
        assert "disagree on 1.5% of the 200 items" in c.note and "items would settle it" in c.note


def test_items_to_resolve_is_the_paired_proportion_s_standard_error():
    assert items_to_resolve(0.1, 0.01) == math.ceil(1.959964 ** 2 * 0.1 / 0.01 ** 2)  # 3,842
    assert items_to_resolve(0.2, 0.01) > items_to_resolve(0.1, 0.01) > items_to_resolve(0.1, 0.02)
    assert items_to_resolve(0.1, 0.0) == math.inf


@pytest.mark.parametrize("scale, status", [(2.0, "holds"), (1 / 3, "unresolved")])
def test_that_many_items_settle_the_claim(scale, status):
    """Rows that disagree on 20% of the items, evenly both ways (difference 0), against a bound 3 points away:
    twice the items the formula asks for settle the claim; a third of them do not."""
    n = round(scale * items_to_resolve(0.2, 0.03))
    k = round(0.1 * n)  # items only dense gets right, and as many only the method gets right
    dense = [1] * k + [0] * k + [1] * (n - 2 * k)
    method = [0] * k + [1] * k + [1] * (n - 2 * k)
    p = paired({"dense": _row(lambada=dense), "m": _row(lambada=method)}, "dense", "m", ["lambada"])
    assert paired_check("c", 0.0, 0.03, 0, "at_most", p).status == status


def test_rows_that_answered_different_items_are_refused():
    table = {"dense": _row(copa=[1, 0, 1]), "m": _row(copa=[1, 0])}
    with pytest.raises(ValueError, match="not paired"):
        paired(table, "dense", "m", ["copa"])


def test_no_task_compared_is_a_plain_check_that_fails():
    c = paired_check("c", math.nan, 0.01, 1e-9, "at_most", None)
    assert c.status == "fails" and c.interval is None
