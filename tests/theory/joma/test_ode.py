"""JoMA "modified MLP" ODEs: integrator ≡ closed form, the erf invariants (the right one and the
slides' one), blow-up detection, Theorem 4 rates, the authors' Euler simulation, config checks."""
import math

import numpy as np
import pytest
import torch
from scipy.special import erfinv

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import attention_entropy
from attnlab.theory.joma.exp_ode_linear import LinearConfig
from attnlab.theory.joma.exp_ode_nonlinear import NonlinearConfig
from attnlab.theory.joma.ode import (
    authors_softmax_simulation,
    convergence_rates,
    erf_invariant,
    integrate,
    integrate_linear,
    integrate_nonlinear,
    invariant_spread,
    linear_blowup_time,
    linear_closed_form,
    linear_rhs,
)
from attnlab.theory.joma.ode_checks import draw_mu

# mixed signs, a ~0 "common" entry, an exact 0, and argmax|Δ| negative
DELTA = np.array([0.3, -0.9, 1e-3, 0.0, 0.55, -0.2, 0.75])
KEEP = np.abs(DELTA) > 1e-4


@pytest.fixture(scope="module")
def linear_traj():
    return integrate_linear(DELTA, scale=2.0, cap=6.0)


def test_integrator_matches_closed_form(linear_traj):
    t_star = linear_blowup_time(DELTA)
    t = np.linspace(0, 0.95 * t_star, 40)
    tr = integrate(lambda v: linear_rhs(v, DELTA), np.zeros_like(DELTA), t[-1], t_eval=t)
    assert not tr.diverged
    np.testing.assert_allclose(tr.v, linear_closed_form(DELTA, t), rtol=1e-9, atol=1e-12)
    assert np.all(tr.v[:, 3] == 0)  # Δ = 0 never moves
    assert np.all(np.sign(tr.v[-1]) == np.sign(DELTA))


def test_exact_invariant_holds(linear_traj):
    live = linear_traj.t > 0
    inv = erf_invariant(linear_traj.v[live], DELTA, 2.0)  # (N, M)
    assert invariant_spread(inv, KEEP) < 1e-9
    np.testing.assert_allclose(inv[:, KEEP], (linear_traj.t[live, None] * math.sqrt(2 / math.pi)).repeat(KEEP.sum(), 1),
                               rtol=1e-9)


def test_slides_invariant_belongs_to_exp_v2_over_4(linear_traj):
    tr4 = integrate_linear(DELTA, scale=4.0, cap=6.0)
    assert invariant_spread(erf_invariant(tr4.v[tr4.t > 0], DELTA, 4.0), KEEP) < 1e-9
    # ... and is NOT an invariant of the stated ODE dv/dt = Δ exp(v²/2)
    assert invariant_spread(erf_invariant(linear_traj.v[linear_traj.t > 0], DELTA, 4.0), KEEP) > 0.1
    # blow-up at √π/max|Δ|; the cap |v| = 6 is reached erfc(6/2) ≈ 2e-5 (relative) before it
    assert tr4.t_blowup == pytest.approx(math.sqrt(math.pi) / 0.9 * (1 - math.erfc(3.0)), rel=1e-8)


def test_blowup_detected_at_closed_form(linear_traj):
    tr = linear_traj
    assert tr.diverged and tr.component == (1,)  # argmax|Δ|, a negative Δ: v → −∞
    assert tr.v[-1, 1] == pytest.approx(-6.0)
    assert tr.t_blowup == pytest.approx(math.sqrt(math.pi / 2) / 0.9, rel=1e-6)
    others = np.arange(len(DELTA)) != 1
    np.testing.assert_allclose(tr.v[-1, others], math.sqrt(2) * erfinv(DELTA[others] / 0.9), atol=1e-6)


def test_blowup_detected_without_cap_by_step_collapse():
    tr = integrate(lambda v: linear_rhs(v, DELTA), np.zeros_like(DELTA), 3.0)  # no cap: the solver gives up
    assert tr.diverged and tr.component == (1,)
    assert tr.t_blowup == pytest.approx(math.sqrt(math.pi / 2) / 0.9, rel=1e-6)


@pytest.mark.slow
def test_nonlinear_converges_at_theorem4_rates():
    mu = np.stack([draw_mu(s, 6, 1.0, 4.0).double().numpy() for s in range(2)])  # (2, 6)
    tr = integrate_nonlinear(mu, 0.05, 30.0, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.v[-1], mu, rtol=1e-10)
    rate, n = convergence_rates(tr.t, tr.v, mu, (1e-3, 1e-8))
    assert (n >= 10).all()
    pred = np.exp(mu**2 / 2)
    np.testing.assert_allclose(rate, pred, rtol=0.01)
    j, k = np.triu_indices(6, 1)
    np.testing.assert_allclose(rate[:, k] / rate[:, j], np.exp((mu[:, k] ** 2 - mu[:, j] ** 2) / 2), rtol=0.01)


def test_authors_simulation_start_and_one_step():
    mu = draw_mu(0, 10, 1.0, 4.0)
    torch.manual_seed(0)  # the authors' global seed draws the same μ
    assert torch.equal(mu, (torch.rand(10) * 3 + 1).sort().values)
    sim = authors_softmax_simulation(mu, 0.05, 0.02, 3, 3.0)
    assert sim.entropy[0].item() == pytest.approx(math.log(10), abs=1e-6)  # equal v -> uniform attention
    assert sim.v.shape == (4, 10) and sim.entropy.shape == (3,)
    # one Euler step by hand, 2 components, float64
    mu2, v0 = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.5, 1.0], dtype=torch.float64)
    sim2 = authors_softmax_simulation(mu2, v0, eta=0.1, steps=1, tau=3.0)
    e = [math.exp(0.25 / 3), math.exp(1.0 / 3)]
    a = [e[0] / sum(e), e[1] / sum(e)]
    expect = [0.5 + 0.1 * 0.5 * a[0], 1.0 + 0.1 * 1.0 * a[1]]
    assert sim2.v[1].tolist() == pytest.approx(expect, abs=1e-14)
    assert sim2.entropy[0].item() == pytest.approx(-sum(p * math.log(p) for p in a), abs=1e-7)
    assert sim2.entropy[0].item() == pytest.approx(attention_entropy(torch.tensor(a, dtype=torch.float64)).item(),
                                                   abs=1e-12)


@pytest.mark.parametrize("cls,kwargs,fragment", [
    (LinearConfig, {"components": 1}, "components"),
    (LinearConfig, {"common": 20}, "common"),
    (LinearConfig, {"cap": 2.0}, "cap"),
    (NonlinearConfig, {"tau": 0.0}, "tau"),
    (NonlinearConfig, {"eta": -0.1}, "eta"),
    (NonlinearConfig, {"steps": 0}, "steps"),
    (NonlinearConfig, {"mu_low": 5.0}, "mu_low"),
])
def test_bad_config(cls, kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        cls(**kwargs)


def test_bad_simulation_args():
    with pytest.raises(ConfigError, match="tau"):
        authors_softmax_simulation(torch.ones(3), 0.05, tau=0.0)
