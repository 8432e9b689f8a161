"""Theorems 2-4 checked on short population trajectories; the claim decision rules."""
import math

import numpy as np
import pytest
import torch

from attnlab.experiments.claims import TESTS, Claim, check
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
ETA_Z = 1.0


def _trajectory(dist, eta_y):
    zero = torch.zeros(dist.M, dist.M, dtype=torch.float64)
    sol = integrate_flow(dist, zero, zero, eta_y, ETA_Z, T_EVAL)
    return sol, z_rates(dist, sol, eta_y, ETA_Z)


@pytest.fixture(scope="module")
def single_common():
    d = SeqClassDistribution(SeqClassConfig(num_common=1))
    return (d, *_trajectory(d, 10.0))


@pytest.fixture(scope="module")
def default_runs():
    d = SeqClassDistribution(SeqClassConfig())
    return d, {ratio: _trajectory(d, ratio * ETA_Z) for ratio in (10.0, 100.0)}


def test_theorem2_signs_single_common(single_common):
    d, sol, dZ = single_common
    assert dZ.shape == (len(T_EVAL), d.M, d.M)
    s = theorem2_signs(d, dZ, sol.t)
    assert s["distinct_positive_fraction"] == 1.0
    assert s["common_negative_fraction"] == 1.0
    assert s["distinct_min_rate"] > 0 > s["common_max_rate"]
    # at t = 0 from zero init the decoder is zero, so every rate vanishes (excluded above)
    assert (dZ[0] == 0).all()


def test_theorem2_signs_all_commons(default_runs):
    d, runs = default_runs
    for sol, dZ in runs.values():
        s = theorem2_signs(d, dZ, sol.t)
        assert s["distinct_positive_fraction"] == 1.0


def test_theorem2_fractions_count_violations(single_common):
    """The fractions are (time, token) counts: flipping one token's rate lowers them by 1/D."""
    d, sol, dZ = single_common
    D = d.distinct.shape[1]
    bad = dZ.clone()
    bad[:, d.query[0], d.distinct[0, 3]] *= -1
    s = theorem2_signs(d, bad, sol.t)
    assert math.isclose(s["distinct_positive_fraction"], 1 - 1 / (d.K * D), rel_tol=1e-6)
    assert s["distinct_min_rate"] < 0
    bad = dZ.clone()
    bad[-10:, d.query_ids[0], d.common[0]] = 1.0  # last 10 times
    s = theorem2_signs(d, bad, sol.t)
    assert math.isclose(s["common_negative_fraction"], 1 - 10 / (len(T_EVAL) - 1), rel_tol=1e-6)
    nocommon = SeqClassDistribution(SeqClassConfig(num_common=0))
    s = theorem2_signs(nocommon, torch.zeros(3, nocommon.M, nocommon.M), np.array([0.0, 1.0, 2.0]))
    assert math.isnan(s["common_negative_fraction"]) and s["distinct_positive_fraction"] == 0.0


def test_theorem3_relative_gain(default_runs):
    d, runs = default_runs
    errs = {}
    for ratio, (sol, dZ) in runs.items():
        g = theorem3_relative_gain(d, sol, dZ, ETA_Z)
        assert g.bounds_hold_fraction == 1.0
        assert g.B[0] == 0 and (np.diff(g.B) >= -1e-12).all()  # B_n = η_Z ∫ξ_n, ξ_n > 0
        assert (g.xi[1:] > 0).all()
        assert (g.chi_l0 >= 1 - 1e-12).all()  # the dominant token's logit only grows
        assert 0 < g.f2_l0_init < 1
        assert g.xi_fit_residual < 0.5
        # χ_l0 is exp(2Δz) of the dominant (largest-P) distinct token, recomputed here
        l0 = d.distinct[0, -1]
        m = d.query[0]
        np.testing.assert_allclose(g.chi_l0, torch.exp(2 * (sol.Z[:, m, l0] - sol.Z[0, m, l0])).numpy())
        errs[ratio] = g.closed_form_rel_error
    assert errs[100.0] < errs[10.0]


def test_theorem4_transition_time(default_runs):
    d, runs = default_runs
    for ratio, (sol, dZ) in runs.items():
        eta_y = ratio * ETA_Z
        g = theorem3_relative_gain(d, sol, dZ, ETA_Z)
        th4 = theorem4_scan_snap(d, g, eta_y, ETA_Z)
        t0 = snap_time(d, eta_y)
        assert math.isclose(th4["t0"], 2 * d.K * math.log(d.M) / eta_y)
        assert t0 / 10 <= th4["t_peak"] <= 10 * t0
        assert math.isclose(th4["peak_over_t0"], th4["t_peak"] / t0)
        assert math.isclose(th4["predicted_a"], 2 * d.K * ETA_Z / eta_y)
        assert min(th4["fit_t"]) >= t0
        assert th4["fit_r2"] <= 1.0


# --------------------------------------------------------------------------- claims
@pytest.mark.parametrize(
    "test,measured,expected,tol,holds",
    [
        ("abs", 1.05, 1.0, 0.1, True),
        ("abs", 0.85, 1.0, 0.1, False),
        ("abs", 1.0, 1.0, 0.0, True),
        ("rel", 104.0, 100.0, 0.05, True),
        ("rel", 94.0, 100.0, 0.05, False),
        ("rel", -104.0, -100.0, 0.05, True),
        ("at_least", 0.95, 1.0, 0.1, True),
        ("at_least", 1.0, 1.0, 0.0, True),
        ("at_least", 0.999, 1.0, 0.0, False),
        ("at_least", 5.0, 1.0, 0.0, True),
        ("at_most", 0.05, 0.0, 0.1, True),
        ("at_most", 0.2, 0.0, 0.1, False),
        ("at_most", -3.0, 0.0, 0.0, True),
        ("factor", 5.0, 1.0, 10.0, True),
        ("factor", 0.1, 1.0, 10.0, True),
        ("factor", 0.09, 1.0, 10.0, False),
        ("factor", 11.0, 1.0, 10.0, False),
    ],
)
def test_claim_rules(test, measured, expected, tol, holds):
    c = check("a claim", measured, expected, tol, test)
    assert isinstance(c, Claim)
    assert c.holds is holds
    j = c.to_json()
    assert j["rule"] == TESTS[test][0]
    assert {k: j[k] for k in ("claim", "measured", "expected", "tolerance", "holds", "test")} == {
        "claim": "a claim", "measured": measured, "expected": expected, "tolerance": tol, "holds": holds, "test": test}


@pytest.mark.parametrize("test", sorted(TESTS))
def test_nan_never_holds(test):
    for tol in (0.0, 1.0, 1e300, math.inf):
        assert check("x", math.nan, 1.0, tol, test).holds is False
    assert check("x", np.float64("nan"), 0.0, 10.0, test).holds is False
    assert check("x", torch.tensor(float("nan")), 0.0, 10.0, test).holds is False


def test_claim_accepts_tensors_and_numpy_and_rejects_unknown_tests():
    c = check("x", torch.tensor(0.5), np.float32(0.5), 0, "abs")
    assert c.holds is True and type(c.measured) is float and type(c.expected) is float
    with pytest.raises(ValueError):
        check("x", 1.0, 1.0, 0.0, "close_enough")
