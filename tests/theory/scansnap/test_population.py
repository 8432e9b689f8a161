"""The T→∞ population flow: closed form ≡ autograd ≡ the paper's formula; the integrator ≡
fine explicit Euler; large-batch, small-step SGD tracks it."""
import itertools
import math

import numpy as np
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.population import (
    attention_c,
    distinct_entropy,
    expected_loss,
    flow,
    flow_autograd,
    integrate_flow,
)
from attnlab.theory.scansnap.train import SGDConfig, train_sweep

COMBOS = list(itertools.product([True, False], [True, False]))  # (normalize, residual)
TWO_QUERIES = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_common_per_last=1,
                                                  num_distinct_per_next=4))
TINY = SeqClassDistribution(SeqClassConfig(num_common=1, num_distinct_per_next=3))


def _randn(M, seed, scale):
    return scale * torch.randn(M, M, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --------------------------------------------------------------------------- closed form
@pytest.mark.parametrize("normalize,residual", COMBOS)
@pytest.mark.parametrize("dist", [TWO_QUERIES, SeqClassDistribution(SeqClassConfig(num_last=2))],
                         ids=["small", "default-2-queries"])
def test_flow_equals_autograd(dist, normalize, residual):
    Y, Z = _randn(dist.M, 0, 0.7), _randn(dist.M, 1, 1.5)
    dY, dZ = flow(dist, Y, Z, 3.0, 0.6, normalize, residual)
    aY, aZ = flow_autograd(dist, Y, Z, 3.0, 0.6, normalize, residual)
    torch.testing.assert_close(dY, aY, rtol=0, atol=1e-10)
    torch.testing.assert_close(dZ, aZ, rtol=0, atol=1e-10)
    assert dY.abs().max() > 1e-3 and dZ.abs().max() > 1e-4  # not trivially zero


def _paper_flow(dist, Y, Z, eta_y, eta_z):
    """THEORY.md's closed form for normalize=True, residual=False, written independently:
    c_{l|n} ∝ P(l|n) exp(z_{ψ(n) l}), f_n = c_n/||c_n||, α_n = softmax(Y f_n),
    dY = η_Y Σ_n P(n)(e_n − α_n) f_nᵀ,
    dz_m = η_Z Σ_{n∈ψ⁻¹(m)} P(n) diag(f_n)(I − f_n f_nᵀ) Yᵀ(e_n − α_n)."""
    M, K = dist.M, dist.K
    dY = torch.zeros(M, M, dtype=torch.float64)
    dZ = torch.zeros(M, M, dtype=torch.float64)
    I = torch.eye(M, dtype=torch.float64)
    for n in range(K):
        m = int(dist.query[n])
        w = dist.P[n] * torch.exp(Z[m])
        c = w / w.sum()
        f = c / torch.sqrt((c * c).sum())
        logits = Y @ f
        alpha = torch.exp(logits - logits.max())
        alpha = alpha / alpha.sum()
        e = torch.zeros(M, dtype=torch.float64)
        e[int(dist.label[n])] = 1.0
        dY += eta_y * (1 / K) * torch.outer(e - alpha, f)
        dZ[m] += eta_z * (1 / K) * torch.diag(f) @ (I - torch.outer(f, f)) @ Y.T @ (e - alpha)
    return dY, dZ


def test_flow_matches_the_papers_formula():
    dist = TWO_QUERIES
    Y, Z = _randn(dist.M, 2, 1.0), _randn(dist.M, 3, 1.0)
    dY, dZ = flow(dist, Y, Z, 5.0, 0.3, normalize=True, residual=False)
    pY, pZ = _paper_flow(dist, Y, Z, 5.0, 0.3)
    torch.testing.assert_close(dY, pY, rtol=0, atol=1e-12)
    torch.testing.assert_close(dZ, pZ, rtol=0, atol=1e-12)
    for q in dist.query_ids:
        assert dZ[q].abs().max() > 1e-4
    # ... and the formula is specific: the unnormalised flow differs
    _, dZ_raw = flow(dist, Y, Z, 5.0, 0.3, normalize=False, residual=False)
    assert (dZ_raw - pZ).abs().max() > 1e-4


@pytest.mark.parametrize("normalize,residual", COMBOS)
def test_only_query_rows_of_z_move(normalize, residual):
    dist = TWO_QUERIES
    Y, Z = _randn(dist.M, 4, 1.0), _randn(dist.M, 5, 1.0)
    rows = torch.ones(dist.M, dtype=torch.bool)
    rows[dist.query_ids] = False
    for _, dZ in (flow(dist, Y, Z, 1.0, 1.0, normalize, residual),
                  flow_autograd(dist, Y, Z, 1.0, 1.0, normalize, residual)):
        assert (dZ[rows] == 0).all()
        assert (dZ[~rows].abs().sum(1) > 0).all()
    # rates scale linearly with the learning rates
    dY1, dZ1 = flow(dist, Y, Z, 1.0, 1.0, normalize, residual)
    dY2, dZ2 = flow(dist, Y, Z, 2.5, 0.4, normalize, residual)
    torch.testing.assert_close(dY2, 2.5 * dY1)
    torch.testing.assert_close(dZ2, 0.4 * dZ1)


def test_attention_c_is_the_normalised_prior_at_zero_and_a_softmax():
    dist = TWO_QUERIES
    c0 = attention_c(dist, torch.zeros(dist.M, dist.M, dtype=torch.float64))
    torch.testing.assert_close(c0, dist.P)
    Z = _randn(dist.M, 6, 2.0)
    c = attention_c(dist, Z)
    torch.testing.assert_close(c.sum(-1), torch.ones(dist.K, dtype=torch.float64))
    n = 3
    w = dist.P[n] * torch.exp(Z[dist.query[n]])
    torch.testing.assert_close(c[n], w / w.sum())


# --------------------------------------------------------------------------- entropy metric
def test_distinct_entropy_at_zero_is_the_prior_entropy():
    dist = SeqClassDistribution(SeqClassConfig())
    w = np.linspace(0.1, 1.0, 10)
    p = w / w.sum()
    H = float(-(p * np.log(p)).sum())
    assert abs(H - 2.151) < 1e-3
    e = distinct_entropy(dist, torch.zeros(dist.M, dist.M, dtype=torch.float64))
    assert e.shape == (dist.K,)
    torch.testing.assert_close(e, torch.full((dist.K,), H, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (e <= math.log(10)).all()


def test_distinct_entropy_tracks_z_and_batches():
    dist = SeqClassDistribution(SeqClassConfig(num_last=2))
    Z = torch.zeros(2, 3, dist.M, dist.M, dtype=torch.float64)
    m, l = dist.query[0], dist.distinct[0, 4]
    Z[1, 2, m, l] = 50.0  # all of class 0's distinct mass on one token
    Z[0, 1, m, dist.common] = 7.0  # commons do not enter the metric
    e = distinct_entropy(dist, Z)
    assert e.shape == (2, 3, dist.K)
    H0 = distinct_entropy(dist, torch.zeros(dist.M, dist.M, dtype=torch.float64))
    torch.testing.assert_close(e[0, 1], H0)
    assert e[1, 2, 0] < 1e-15
    torch.testing.assert_close(e[1, 2, 1:], H0[1:])  # the other classes are untouched
    # uniformising the distinct weights maximises it: ln 10
    Zu = torch.zeros(dist.M, dist.M, dtype=torch.float64)
    Zu[m, dist.distinct[0]] = -dist.P[0, dist.distinct[0]].log()
    assert abs(float(distinct_entropy(dist, Zu)[0]) - math.log(10)) < 1e-12


# --------------------------------------------------------------------------- integrator
def _euler(dist, Y, Z, eta_y, eta_z, t_report, h, normalize=True, residual=False):
    out, k = [], 0
    steps = np.rint(np.asarray(t_report) / h).astype(int)
    for target in steps:
        while k < target:
            dY, dZ = flow(dist, Y, Z, eta_y, eta_z, normalize, residual)
            Y, Z = Y + h * dY, Z + h * dZ
            k += 1
        out.append((Y.clone(), Z.clone()))
    return out


@pytest.fixture(scope="module")
def short_flow():
    dist = TINY
    Y0, Z0 = _randn(dist.M, 7, 0.5), _randn(dist.M, 8, 0.5)
    t = np.array([0.0, 0.1, 0.25, 0.5])
    sol = integrate_flow(dist, Y0, Z0, 10.0, 3.0, t)
    return dist, Y0, Z0, t, sol


@pytest.mark.slow
def test_integrator_matches_fine_euler(short_flow):
    dist, Y0, Z0, t, sol = short_flow
    assert np.allclose(sol.t, t)
    assert sol.Y.shape == sol.Z.shape == (len(t), dist.M, dist.M)
    torch.testing.assert_close(sol.Y[0], Y0)
    torch.testing.assert_close(sol.Z[0], Z0)
    euler = _euler(dist, Y0, Z0, 10.0, 3.0, t, h=1e-4)
    for i in range(1, len(t)):
        Ye, Ze = euler[i]
        for ode, eul, start in ((sol.Y[i], Ye, Y0), (sol.Z[i], Ze, Z0)):
            moved = (eul - start).norm()
            assert moved > 1e-2  # the state really moved over the horizon
            assert (ode - eul).norm() / moved < 1e-3
    # non-query rows of Z stay at their initial value
    rows = torch.ones(dist.M, dtype=torch.bool)
    rows[dist.query_ids] = False
    assert torch.equal(sol.Z[:, rows], Z0[rows].expand(len(t), -1, -1))


def test_expected_loss_decreases_along_the_flow():
    dist = TINY
    Y0, Z0 = _randn(dist.M, 9, 0.5), _randn(dist.M, 10, 0.5)
    t = np.concatenate([[0.0], np.logspace(-2, 2, 60)])
    sol = integrate_flow(dist, Y0, Z0, 5.0, 2.0, t)
    L = np.array([float(expected_loss(dist, Y, Z)) for Y, Z in zip(sol.Y, sol.Z)])
    assert (np.diff(L) < 1e-12).all()
    assert L[-1] < 0.5 * L[0]  # it actually learns


def test_integrate_flow_rejects_bad_input():
    dist = TINY
    zero = torch.zeros(dist.M, dist.M, dtype=torch.float64)
    with pytest.raises(ConfigError):
        integrate_flow(dist, zero, zero, -1.0, 1.0, np.array([0.0, 1.0]))
    with pytest.raises(ConfigError):
        integrate_flow(dist, zero, zero, 1.0, -1.0, np.array([0.0, 1.0]))
    with pytest.raises(ConfigError):
        integrate_flow(dist, zero, zero, 1.0, 1.0, np.array([1.0, 0.5]))
    with pytest.raises(ConfigError):
        integrate_flow(dist, zero, zero, 1.0, 1.0, np.array([]))


# --------------------------------------------------------------------------- SGD ≈ ODE
@pytest.mark.slow
def test_large_batch_small_step_sgd_tracks_the_ode():
    """Momentum 0, learning rate η·dt: one SGD step is Δt = dt of the flow; with a big batch
    and long sequences, SGD follows the population ODE from the same (default) init."""
    dist = SeqClassDistribution(SeqClassConfig(num_common=1, num_distinct_per_next=3, T=1024))
    eta_y, eta_z, dt = 4.0, 2.0, 0.05
    marks = [25, 50, 100]
    res = train_sweep(dist, torch.tensor([eta_z * dt]), torch.tensor([eta_y * dt]), [3],
                      SGDConfig(steps=marks[-1], batch_size=2048, momentum=0.0), snapshot_steps=[0, *marks])
    Y0, Z0 = (w[0, 0].double() for w in res.snapshots[0])
    sol = integrate_flow(dist, Y0, Z0, eta_y, eta_z, np.array([k * dt for k in marks]))
    errors = []
    for i, k in enumerate(marks):
        Y_sgd, Z_sgd = (w[0, 0].double() for w in res.snapshots[k])
        moved = (sol.Z[i] - Z0).norm()
        assert moved > 0.1  # Z really moved
        errors.append(float((Z_sgd - sol.Z[i]).norm() / moved))
        assert (Y_sgd - sol.Y[i]).norm() / (sol.Y[i] - Y0).norm() < 0.05
    assert max(errors) < 0.05, errors
    # the tolerance is meaningful: with the time scale off by 2x (ODE at t/2) the error is far above it
    for i in (1, 2):
        Z_sgd = res.snapshots[marks[i]][1][0, 0].double()
        assert (Z_sgd - sol.Z[i - 1]).norm() / (sol.Z[i] - Z0).norm() > 0.15
