"""Y/Z model: bag form ≡ positional form, batching ≡ looping, original ≡ reparameterised."""
import itertools

import pytest
import torch

from attnlab.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.model import OriginalAttentionModel, init_yz, yz_logits, yz_logits_tokens

DIST = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_distinct_per_next=4, T=9))


@pytest.mark.parametrize("normalize,residual", list(itertools.product([True, False], [True, False])))
def test_bag_form_equals_positional_form(normalize, residual):
    g = torch.Generator().manual_seed(0)
    Y, Z = (torch.randn(DIST.M, DIST.M, generator=g, dtype=torch.float64) for _ in range(2))
    x, _ = DIST.sample_sequences(64, g)
    bag = yz_logits(Y, Z, DIST.counts_of(x).double(), x[:, -1], normalize, residual)
    pos = yz_logits_tokens(Y, Z, x, normalize, residual)
    torch.testing.assert_close(bag, pos, rtol=1e-10, atol=1e-10)


def test_batched_runs_equal_looped_runs():
    g = torch.Generator().manual_seed(1)
    C, S, B, M = 3, 2, 16, DIST.M
    Y, Z = torch.randn(C, S, M, M, generator=g), torch.randn(C, S, M, M, generator=g)
    batches = [DIST.sample_counts(B, g) for _ in range(S)]
    counts = torch.stack([b[0] for b in batches])  # (S, B, M)
    query = torch.stack([b[1] for b in batches])
    out = yz_logits(Y, Z, counts, query)  # (C, S, B, M)
    for c, s in itertools.product(range(C), range(S)):
        torch.testing.assert_close(out[c, s], yz_logits(Y[c, s], Z[c, s], counts[s], query[s]))


def test_original_parameterisation_reduces_to_yz():
    g = torch.Generator().manual_seed(2)
    x, _ = DIST.sample_sequences(32, g)
    model = OriginalAttentionModel(DIST.M, d=7, norm="none", generator=g).double()
    Y, Z = model.reparameterised()
    torch.testing.assert_close(model.forward_tokens(x), yz_logits_tokens(Y, Z, x, normalize=False))
    # ℓ2 norm in d-space equals normalising in token space when U has orthonormal rows
    model = OriginalAttentionModel(DIST.M, d=DIST.M + 5, norm="l2", generator=g).double()
    q, _ = torch.linalg.qr(torch.randn(DIST.M + 5, DIST.M, generator=g, dtype=torch.float64))
    with torch.no_grad():
        model.U.copy_(q.T)  # (M, d), orthonormal rows
    Y, Z = model.reparameterised()
    torch.testing.assert_close(model.forward_tokens(x), yz_logits_tokens(Y, Z, x, normalize=True))


def test_layernorm_original_model_runs_and_differs_from_l2():
    g = torch.Generator().manual_seed(3)
    x, _ = DIST.sample_sequences(8, g)
    ln = OriginalAttentionModel(DIST.M, d=6, norm="layernorm", generator=torch.Generator().manual_seed(4))
    l2 = OriginalAttentionModel(DIST.M, d=6, norm="l2", generator=torch.Generator().manual_seed(4))
    assert ln.forward_tokens(x).shape == (8, DIST.M)
    assert not torch.allclose(ln.forward_tokens(x), l2.forward_tokens(x))


def test_inits():
    Y, Z = init_yz(10, "zero")
    assert (Y == 0).all() and (Z == 0).all()
    Y, Z = init_yz(10, "default", torch.Generator().manual_seed(0))
    assert Y.abs().max() <= 10**-0.5 and Z.abs().max() <= 10**-0.5 and not torch.equal(Y, Z)
    with pytest.raises(ConfigError):
        init_yz(10, "xavier")
    with pytest.raises(ConfigError):
        OriginalAttentionModel(10, 4, norm="batchnorm")
