"""The hierarchy controls' measurements: the half-gain step, and the random-feature baseline's draws."""
import numpy as np
import pytest

from attnlab.core.errors import ConfigError
from attnlab.theory.joma.alignment import HierarchyConfig
from attnlab.theory.joma.exp_hierarchy_controls import HierarchyControlsConfig, half_time, random_features
from attnlab.theory.joma.transformer import TransformerConfig

STEPS = [0, 10, 100, 1000]


def test_half_time_interpolates_in_log_step_between_evaluations():
    assert half_time(STEPS, np.array([0.0, 0.0, 1.0, 1.0])) == pytest.approx(np.sqrt(10 * 100))  # half-way in log
    assert half_time(STEPS, np.array([0.0, 1.0, 1.0, 1.0])) == pytest.approx(np.sqrt(5 * 10))  # init: half of 10
    assert half_time(STEPS, np.array([0.0, 0.2, 0.5, 1.0])) == pytest.approx(100.0)  # exactly at an evaluation
    assert half_time(STEPS, np.array([0.0, 0.2, 0.6, 1.0])) == pytest.approx(10 ** 1.75)  # 3/4 of the way
    assert half_time(STEPS, np.array([0.5, 0.4, 0.3, 0.2])) == 0.0  # no gain: its start already covers it


def test_random_features_are_independent_untrained_draws_with_one_score_per_level():
    cfg = HierarchyConfig(model=TransformerConfig(n_layers=1, d_model=16, d_ffn=32, n_heads=2), eval_size=256)
    base = random_features(cfg, 3)
    assert base.shape == (3, 2) and (base > 0).all() and (base <= 1).all()
    assert len({tuple(row) for row in base.round(12)}) == 3  # three different draws
    assert np.array_equal(random_features(cfg, 3), base)  # and the same three each time


@pytest.mark.parametrize("change", [{"seeds": 0}, {"random_inits": 1}, {"order_min": 1.5}])
def test_bad_settings_are_refused(change):
    with pytest.raises(ConfigError):
        HierarchyControlsConfig(**change)
