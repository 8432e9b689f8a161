"""Batched SGD sweeps: a sweep == its runs one at a time; the update == torch.optim.SGD."""
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.model import YZModel, cross_entropy
from attnlab.theory.scansnap.train import SGDConfig, check_learning_rates, train_sweep

DIST = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_distinct_per_next=4, T=24))
ETA_Z = torch.tensor([0.5, 1.0, 3.0])
ETA_Y = torch.tensor([2.0, 1.0, 0.5])
CFG = SGDConfig(steps=6, batch_size=32, momentum=0.9)


@pytest.fixture(scope="module")
def sweep():
    return train_sweep(DIST, ETA_Z, ETA_Y, [4, 7], CFG, snapshot_steps=[0, 3, 6])


def test_sweep_shapes_and_snapshots(sweep):
    M = DIST.M
    assert sweep.Y.shape == sweep.Z.shape == (3, 2, M, M)
    assert sweep.loss.shape == (CFG.steps, 3, 2)
    assert sorted(sweep.snapshots) == [0, 3, 6]
    torch.testing.assert_close(sweep.snapshots[6][0], sweep.Y, rtol=0, atol=0)
    torch.testing.assert_close(sweep.snapshots[6][1], sweep.Z, rtol=0, atol=0)
    Y0, Z0 = sweep.snapshots[0]
    # a seed fixes the init: every config starts from the same weights, seeds differ
    for c in range(1, 3):
        assert torch.equal(Y0[c], Y0[0]) and torch.equal(Z0[c], Z0[0])
    assert not torch.equal(Y0[0, 0], Y0[0, 1])
    # ... and each config then moves differently
    assert (sweep.Z[0, 0] - sweep.Z[2, 0]).abs().max() > 1e-4
    assert torch.isfinite(sweep.loss).all()


def test_sweep_equals_each_run_alone(sweep):
    for c in range(len(ETA_Z)):
        for s, seed in enumerate([4, 7]):
            one = train_sweep(DIST, ETA_Z[c : c + 1], ETA_Y[c : c + 1], [seed], CFG, snapshot_steps=[3])
            torch.testing.assert_close(sweep.Y[c, s], one.Y[0, 0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(sweep.Z[c, s], one.Z[0, 0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(sweep.loss[:, c, s], one.loss[:, 0, 0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(sweep.snapshots[3][1][c, s], one.snapshots[3][1][0, 0], rtol=1e-5, atol=1e-5)


def test_seed_result_does_not_depend_on_other_seeds():
    cfg = SGDConfig(steps=5, batch_size=16, momentum=0.5, init="default")
    alone = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([2.0]), [9], cfg)
    for others in ([1, 9], [9, 2, 3], [5, 6, 9]):
        res = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([2.0]), others, cfg)
        s = others.index(9)
        torch.testing.assert_close(res.Y[0, s], alone.Y[0, 0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(res.Z[0, s], alone.Z[0, 0], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(res.loss[:, 0, s], alone.loss[:, 0, 0], rtol=1e-6, atol=1e-6)


def test_same_seed_same_result_different_seed_different():
    a = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [2], SGDConfig(steps=3, batch_size=8))
    b = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [2], SGDConfig(steps=3, batch_size=8))
    c = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [3], SGDConfig(steps=3, batch_size=8))
    assert torch.equal(a.Z, b.Z) and torch.equal(a.loss, b.loss)
    assert not torch.equal(a.Z, c.Z)


@pytest.mark.parametrize("normalize,residual,init", [(True, False, "default"), (False, True, "default"),
                                                     (True, True, "zero")])
def test_update_matches_torch_optim_sgd(normalize, residual, init):
    seed, eta_z, eta_y, mu, B, steps = 13, 0.7, 2.0, 0.9, 24, 5
    cfg = SGDConfig(steps=steps, batch_size=B, momentum=mu, init=init, normalize=normalize, residual=residual)
    res = train_sweep(DIST, torch.tensor([eta_z]), torch.tensor([eta_y]), [seed], cfg)

    # reproduce: the seed's generator draws the init (Y then Z), then one batch per step
    g = torch.Generator().manual_seed(seed)
    model = YZModel(DIST.M, normalize, residual, init, generator=g)
    opt = torch.optim.SGD([{"params": [model.Y], "lr": eta_y}, {"params": [model.Z], "lr": eta_z}], momentum=mu)
    losses = []
    for _ in range(steps):
        counts, query, label = DIST.sample_counts(B, g)
        loss = cross_entropy(model(counts, query), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.testing.assert_close(res.Y[0, 0], model.Y.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.Z[0, 0], model.Z.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.loss[:, 0, 0], torch.tensor(losses), rtol=1e-5, atol=1e-6)
    assert (model.Z.detach() != 0).any()  # the parameters moved


def test_momentum_is_not_plain_sgd():
    """The momentum comparison can fail: μ = 0.9 and μ = 0 give different weights."""
    base = dict(steps=4, batch_size=16, init="default")
    a = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [1], SGDConfig(momentum=0.9, **base))
    b = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [1], SGDConfig(momentum=0.0, **base))
    assert (a.Z - b.Z).abs().max() > 1e-4
    # identical first step (empty buffer), so identical first loss
    assert a.loss[0].item() == b.loss[0].item()


def test_zero_learning_rate_freezes_that_block():
    res = train_sweep(DIST, torch.tensor([0.0]), torch.tensor([1.0]), [1],
                      SGDConfig(steps=3, batch_size=8), snapshot_steps=[0])
    assert torch.equal(res.Z, res.snapshots[0][1])
    assert not torch.equal(res.Y, res.snapshots[0][0])


def test_zero_steps_returns_the_init():
    res = train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [1], SGDConfig(steps=0), snapshot_steps=[0])
    assert res.loss.shape == (0, 1, 1)
    assert torch.equal(res.Y, res.snapshots[0][0])


@pytest.mark.parametrize("eta_z,eta_y", [([-0.1], [1.0]), ([1.0], [-1.0]), ([1.0, -2.0], [1.0, 1.0])])
def test_negative_learning_rate_raises(eta_z, eta_y):
    with pytest.raises(ConfigError):
        check_learning_rates(torch.tensor(eta_z), torch.tensor(eta_y))
    with pytest.raises(ConfigError):
        train_sweep(DIST, torch.tensor(eta_z), torch.tensor(eta_y), [1], SGDConfig(steps=1, batch_size=2))


def test_learning_rate_shapes_and_seeds_checked():
    with pytest.raises(ConfigError):
        check_learning_rates(torch.tensor([1.0, 2.0]), torch.tensor([1.0]))
    with pytest.raises(ConfigError):
        check_learning_rates(torch.tensor(1.0), torch.tensor(1.0))
    check_learning_rates(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.0]))  # zero is allowed
    with pytest.raises(ConfigError):
        train_sweep(DIST, torch.tensor([1.0]), torch.tensor([1.0]), [], SGDConfig(steps=1))


@pytest.mark.parametrize("kwargs", [dict(steps=-1), dict(batch_size=0), dict(momentum=1.0), dict(momentum=-0.1),
                                    dict(init="ones")])
def test_bad_sgd_config(kwargs):
    with pytest.raises(ConfigError):
        SGDConfig(**kwargs)
