"""Theorem checks on short population trajectories, and the claim rules."""
import math

import numpy as np
import pytest
import torch

from attnlab.experiments.claims import check
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.population import integrate_flow
from attnlab.theory.scansnap.theorems import (
    snap_time,
    theorem2_signs,
    theorem3_relative_gain,
    theorem4_scan_snap,
    z_rates,
)

T_EVAL = np.concatenate([[0.0], np.logspace(-3, 3, 150)])


def _trajectory(dist, ratio):
    zero = torch.zeros(dist.M, dist.M, dtype=torch.float64)
    sol = integrate_flow(dist, zero, zero, ratio, 1.0, T_EVAL)
    return sol, z_rates(dist, sol, ratio, 1.0)


def test_theorem2_signs_single_common_token():
    d = SeqClassDistribution(SeqClassConfig(num_common=1, num_distinct_per_next=5))
    sol, dZ = _trajectory(d, 10.0)
    s = theorem2_signs(d, dZ, sol.t)
    assert s["distinct_positive_fraction"] == 1.0 and s["common_negative_fraction"] == 1.0
    assert s["distinct_min_rate"] > 0 > s["common_max_rate"]


def test_theorem2_signs_detects_a_flipped_rate():
    d = SeqClassDistribution(SeqClassConfig(num_common=1, num_distinct_per_next=5))
    sol, dZ = _trajectory(d, 10.0)
    flipped = dZ.clone()
    flipped[:, d.query[0], d.distinct[0, 2]] *= -1
    assert theorem2_signs(d, flipped, sol.t)["distinct_positive_fraction"] < 1.0


def test_theorem3_and_4_on_a_short_run():
    d = SeqClassDistribution(SeqClassConfig())
    gains = {}
    for ratio in (10.0, 100.0):
        sol, dZ = _trajectory(d, ratio)
        g = theorem3_relative_gain(d, sol, dZ, 1.0)
        assert g.bounds_hold_fraction == 1.0
        assert (np.diff(g.B) >= -1e-12).all() and g.B[0] == 0  # B_n monotone from 0
        th4 = theorem4_scan_snap(d, g, ratio, 1.0)
        assert 0.1 <= th4["t_peak"] / snap_time(d, ratio) <= 10
        gains[ratio] = g.closed_form_rel_error
    assert gains[100.0] < gains[10.0]


@pytest.mark.parametrize(
    "test,m,e,t,holds",
    [("abs", 1.05, 1.0, 0.1, True), ("abs", 1.2, 1.0, 0.1, False), ("rel", 110, 100, 0.05, False),
     ("at_least", 0.95, 1.0, 0.1, True), ("at_least", 0.8, 1.0, 0.1, False), ("at_most", 0.2, 0.0, 0.1, False),
     ("factor", 5.0, 1.0, 10.0, True), ("factor", 0.05, 1.0, 10.0, False), ("abs", math.nan, 1.0, 1e9, False)],
)
def test_claim_rules(test, m, e, t, holds):
    c = check("x", m, e, t, test)
    assert c.holds is holds and c.to_json()["rule"]
