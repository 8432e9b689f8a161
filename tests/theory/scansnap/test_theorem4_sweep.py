"""The Theorem 4 sweep: each horizon's fit is scansnap-theorems' own fit on that prefix of the flow, and the
local constant is e^{B_n}/ln²(Mη_Y t/K) over the predicted one; the claims are judged on those numbers."""
import math
from dataclasses import replace

import numpy as np
import pytest

from attnlab.core.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassDistribution
from attnlab.theory.scansnap.exp_theorem4 import Theorem4SweepConfig, _claims, _path, sweep_cell
from attnlab.theory.scansnap.theorems import check_flow, theorem4_scan_snap

CFG = Theorem4SweepConfig(num_last=(1,), ratios=(10.0,), horizons=(1e2, 1e4), points_per_decade=10)


@pytest.fixture(scope="module")
def cell():
    return sweep_cell(SeqClassDistribution(CFG.data), 10.0, CFG)


def test_each_horizon_refits_the_flows_prefix_as_scansnap_theorems_does(cell):
    dist = SeqClassDistribution(CFG.data)
    t = np.concatenate([[0.0], np.logspace(-3, 4, 70)])  # the cell's grid: 10 points a decade from 1e-3
    flow = check_flow(dist, 10.0, 1.0, t)
    assert cell["r2"][-1] == pytest.approx(flow.snap["fit_r2"], abs=1e-9)  # the last horizon: the whole flow
    keep = t <= 1e2 * (1 + 1e-9)
    short = theorem4_scan_snap(dist, replace(flow.gain, t=t[keep], xi=flow.gain.xi[keep], B=flow.gain.B[keep]),
                               10.0, 1.0)
    assert cell["r2"][0] == pytest.approx(short["fit_r2"], abs=1e-9)
    a_eff = math.exp(flow.gain.B[-1]) / math.log(dist.M * 10.0 * 1e4 / dist.K) ** 2
    assert cell["a_local_ratio"][-1] == pytest.approx(a_eff / (2 * dist.K / 10.0), rel=1e-9)
    assert (cell["M"], cell["K"], cell["a_pred"]) == (dist.M, dist.K, 2 * dist.K / 10.0)


def test_the_claims_are_judged_on_the_measurements_and_failures_say_why():
    c = {"M": 33, "K": 2, "r2": [0.3, 0.95], "a_local_ratio": [0.8, 1.5], "t": [1e2, 1e3, 1e4],
         "a_local_curve": [0.8, 1.2, 1.5]}
    fit, trend, const = _claims({(1, 10.0): c}, CFG)
    assert fit.status == "holds" and const.status == "holds" and const.measured == 1.5
    assert trend.status == "fails" and "crossed the prediction" in trend.note
    assert "moving away" in _path({**c, "a_local_ratio": [1.5, 3.0], "a_local_curve": [1.5, 2.0, 3.0]}, 1e2)
    assert "past a peak" in _path({**c, "a_local_ratio": [1.5, 1.8], "a_local_curve": [1.5, 2.5, 1.8]}, 1e2)


@pytest.mark.parametrize("change", [{"num_last": ()}, {"horizons": (1e6, 1e4)}, {"factor": 1.0}])
def test_bad_settings_are_refused(change):
    with pytest.raises(ConfigError):
        Theorem4SweepConfig(**change)
