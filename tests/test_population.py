"""The T→∞ flow: closed form ≡ autograd ≡ the paper's formula; integrator ≡ fine Euler; ≈ SGD."""
import itertools
import math

import numpy as np
import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.model import init_yz
from attnlab.theory.scansnap.population import (
    class_features,
    distinct_entropy,
    expected_loss,
    flow,
    flow_autograd,
    integrate_flow,
)
from attnlab.theory.scansnap.train import SGDConfig, train_sweep

SMALL = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=2, num_distinct_per_next=3))


def _random_yz(dist, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(dist.M, dist.M, generator=g, dtype=torch.float64) for _ in range(2))


@pytest.mark.parametrize("normalize,residual", list(itertools.product([True, False], [True, False])))
def test_closed_form_flow_equals_autograd(normalize, residual):
    Y, Z = _random_yz(SMALL)
    a = flow(SMALL, Y, Z, 3.0, 0.7, normalize, residual)
    b = flow_autograd(SMALL, Y, Z, 3.0, 0.7, normalize, residual)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
    assert a[1].abs().max() > 1e-3  # not trivially zero


def test_flow_matches_the_papers_formula():
    d = SMALL
    Y, Z = _random_yz(d, 1)
    eta_y, eta_z = 2.0, 0.5
    dY, dZ = flow(d, Y, Z, eta_y, eta_z)
    c = torch.softmax(Z[d.query] + d.P.log(), -1)  # (K, M)
    f = c / c.norm(dim=-1, keepdim=True)
    for m in d.query_ids:
        expect = torch.zeros(d.M, dtype=torch.float64)
        for n in torch.nonzero(d.query == m).flatten():
            alpha = torch.softmax(Y @ f[n], 0)
            e = torch.zeros(d.M, dtype=torch.float64)
            e[d.label[n]] = 1
            proj = torch.eye(d.M, dtype=torch.float64) - torch.outer(f[n], f[n])
            expect += (1 / d.K) * torch.diag(f[n]) @ proj @ Y.T @ (e - alpha)
        torch.testing.assert_close(dZ[m], eta_z * expect)
    others = torch.ones(d.M, dtype=torch.bool)
    others[d.query_ids] = False
    assert (dZ[others] == 0).all()
    expect_y = sum((1 / d.K) * torch.outer(torch.eye(d.M, dtype=torch.float64)[d.label[n]] - torch.softmax(Y @ f[n], 0), f[n])
                   for n in range(d.K))
    torch.testing.assert_close(dY, eta_y * expect_y)


def test_distinct_entropy_at_zero_is_the_prior_entropy():
    d = SeqClassDistribution(SeqClassConfig())
    w = torch.linspace(0.1, 1, 10, dtype=torch.float64)
    p = w / w.sum()
    h = distinct_entropy(d, torch.zeros(d.M, d.M, dtype=torch.float64))
    torch.testing.assert_close(h, torch.full((d.K,), float(-(p * p.log()).sum()), dtype=torch.float64))
    assert abs(h[0].item() - 2.151) < 1e-3 and h[0] < math.log(10)


def test_integrator_matches_fine_euler_and_decreases_loss():
    d = SeqClassDistribution(SeqClassConfig(num_common=1, num_distinct_per_next=3))
    Y0, Z0 = _random_yz(d, 2, scale=0.3)
    t = np.linspace(0, 0.5, 6)
    sol = integrate_flow(d, Y0, Z0, 2.0, 1.0, t)
    Y, Z, h = Y0.clone(), Z0.clone(), 1e-4
    for i in range(1, len(t)):
        for _ in range(int(round((t[i] - t[i - 1]) / h))):
            dY, dZ = flow(d, Y, Z, 2.0, 1.0)
            Y, Z = Y + h * dY, Z + h * dZ
        assert ((sol.Z[i] - Z).norm() / (Z - Z0).norm()) < 1e-3
        assert ((sol.Y[i] - Y).norm() / (Y - Y0).norm()) < 1e-3
    long = integrate_flow(d, Y0, Z0, 2.0, 1.0, np.logspace(-2, 3, 30))
    losses = torch.stack([expected_loss(d, y, z) for y, z in zip(long.Y, long.Z)])
    assert (losses.diff() < 0).all()


def test_integrator_rejects_bad_input():
    Y, Z = _random_yz(SMALL)
    with pytest.raises(ConfigError):
        integrate_flow(SMALL, Y, Z, -1.0, 1.0, np.array([0.0, 1.0]))
    with pytest.raises(ConfigError):
        integrate_flow(SMALL, Y, Z, 1.0, 1.0, np.array([1.0, 0.5]))


def test_large_batch_small_step_sgd_tracks_the_ode():
    d = SeqClassDistribution(SeqClassConfig(num_common=2, num_distinct_per_next=3, T=1024))
    dt, steps, ey, ez = 0.05, 100, 2.0, 1.0
    res = train_sweep(d, torch.tensor([ez * dt]), torch.tensor([ey * dt]), [3],
                      SGDConfig(steps=steps, batch_size=1024, momentum=0.0), snapshot_steps=[0, steps])
    Y0, Z0 = (x[0, 0].double() for x in res.snapshots[0])
    sol = integrate_flow(d, Y0, Z0, ey, ez, np.array([0.0, steps * dt]))
    err = (res.Z[0, 0].double() - sol.Z[-1]).norm() / (sol.Z[-1] - Z0).norm()
    assert err < 0.1
