"""Batched SGD: a sweep ≡ its runs one at a time ≡ torch.optim.SGD."""
import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.model import YZModel, cross_entropy
from attnlab.theory.scansnap.train import SGDConfig, train_sweep

D = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_distinct_per_next=4, T=12))
CFG = SGDConfig(steps=6, batch_size=16)


def test_sweep_equals_single_runs_and_seed_independence():
    eta_z, eta_y = torch.tensor([0.5, 2.0]), torch.tensor([1.0, 10.0])
    full = train_sweep(D, eta_z, eta_y, [1, 2, 3], CFG)
    for c in range(2):
        for s, seed in enumerate([1, 2, 3]):
            one = train_sweep(D, eta_z[c : c + 1], eta_y[c : c + 1], [seed], CFG)
            torch.testing.assert_close(full.Z[c, s], one.Z[0, 0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(full.Y[c, s], one.Y[0, 0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(full.Z[0, 0], full.Z[1, 0])  # configs do differ


def test_update_matches_torch_optim_sgd():
    cfg = SGDConfig(steps=5, batch_size=16, momentum=0.9)
    res = train_sweep(D, torch.tensor([0.7]), torch.tensor([2.1]), [4], cfg)
    g = torch.Generator().manual_seed(4)
    model = YZModel(D.M, init="default", generator=g)
    opt_y = torch.optim.SGD([model.Y], lr=2.1, momentum=0.9)
    opt_z = torch.optim.SGD([model.Z], lr=0.7, momentum=0.9)
    for _ in range(cfg.steps):
        counts, query, label = D.sample_counts(cfg.batch_size, g)
        loss = cross_entropy(model(counts, query), label)
        opt_y.zero_grad(), opt_z.zero_grad()
        loss.backward()
        opt_y.step(), opt_z.step()
    torch.testing.assert_close(res.Z[0, 0], model.Z.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(res.Y[0, 0], model.Y.detach(), rtol=1e-5, atol=1e-6)


def test_snapshots_and_loss_decrease():
    res = train_sweep(D, torch.tensor([1.0]), torch.tensor([1.0]), [1], SGDConfig(steps=30, init="zero"),
                      snapshot_steps=[0, 10, 30])
    assert sorted(res.snapshots) == [0, 10, 30]
    assert (res.snapshots[0][1] == 0).all()
    torch.testing.assert_close(res.snapshots[30][1], res.Z)
    assert res.loss[-5:].mean() < res.loss[:5].mean()


@pytest.mark.parametrize("eta_z,eta_y", [(-1.0, 1.0), (1.0, -0.5)])
def test_negative_learning_rate_rejected(eta_z, eta_y):
    with pytest.raises(ConfigError):
        train_sweep(D, torch.tensor([eta_z]), torch.tensor([eta_y]), [1], CFG)


@pytest.mark.parametrize("kwargs", [dict(momentum=1.0), dict(batch_size=0), dict(steps=-1), dict(init="he")])
def test_bad_sgd_config(kwargs):
    with pytest.raises(ConfigError):
        SGDConfig(**kwargs)
