"""Y/Z model: bag (count) form == positional form, batching, and the original U/W parameterisation."""
import itertools
import math

import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.model import (
    OriginalAttentionModel,
    YZModel,
    bag_attention,
    cross_entropy,
    init_yz,
    yz_logits,
    yz_logits_tokens,
)

COMBOS = list(itertools.product([True, False], [True, False]))  # (normalize, residual)


def _rand(shape, seed, scale=1.0, dtype=torch.float32):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.fixture(scope="module")
def dist():
    return SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_distinct_per_next=4, T=12))


@pytest.mark.parametrize("normalize,residual", COMBOS)
def test_count_form_equals_positional_form(dist, normalize, residual):
    M = dist.M
    Y, Z = _rand((M, M), 0), _rand((M, M), 1, scale=2.0)  # large Z: far-from-uniform attention
    x, _ = dist.sample_sequences(64, torch.Generator().manual_seed(2))
    a = yz_logits(Y, Z, dist.counts_of(x), x[:, -1], normalize, residual)
    b = yz_logits_tokens(Y, Z, x, normalize, residual)
    assert a.shape == b.shape == (64, M)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # the comparison is not vacuous: attention varies across samples and depends on Z
    assert a.std(0).max() > 1e-2
    b0 = yz_logits_tokens(Y, torch.zeros_like(Z), x, normalize, residual)
    assert (a - b0).abs().max() > 1e-2


def test_positional_form_by_hand(dist):
    """One sequence, written out: b_t = softmax_t z_{m,x_t}, u = Σ b_t e_{x_t}, logits = Y u/||u||."""
    M = dist.M
    Y, Z = _rand((M, M), 3, dtype=torch.float64), _rand((M, M), 4, dtype=torch.float64)
    m = int(dist.query_ids[1])
    x = torch.tensor([[0, 5, 5, 1, 5, m]])
    z = torch.stack([Z[m, t] for t in x[0, :-1]])
    b = torch.exp(z) / torch.exp(z).sum()
    u = torch.zeros(M, dtype=torch.float64)
    for t, bt in zip(x[0, :-1], b):
        u[t] += bt
    for normalize, residual in COMBOS:
        v = u.clone()
        if residual:
            v[m] += 1
        if normalize:
            v = v / v.norm()
        torch.testing.assert_close(yz_logits_tokens(Y, Z, x, normalize, residual)[0], Y @ v, rtol=1e-12, atol=1e-12)
        counts = dist.counts_of(x).double()
        torch.testing.assert_close(yz_logits(Y, Z, counts, x[:, -1], normalize, residual)[0], Y @ v,
                                   rtol=1e-12, atol=1e-12)


def test_bag_attention_rows_sum_to_one_and_skip_absent_tokens(dist):
    M = dist.M
    Z = _rand((M, M), 5, scale=3.0)
    counts, query, _ = dist.sample_counts(32, torch.Generator().manual_seed(6))
    a = bag_attention(Z, counts, query)
    torch.testing.assert_close(a.sum(-1), torch.ones(32))
    assert (a[counts == 0] == 0).all() and (a[counts > 0] > 0).all()


@pytest.mark.parametrize("normalize,residual", COMBOS)
def test_batched_leading_dims_equal_a_loop(dist, normalize, residual):
    C, S, B, M = 3, 2, 16, dist.M
    Y, Z = _rand((C, S, M, M), 7), _rand((C, S, M, M), 8, scale=2.0)
    g = torch.Generator().manual_seed(9)
    batches = [dist.sample_counts(B, g) for _ in range(S)]
    counts = torch.stack([b[0] for b in batches])  # (S, B, M)
    query = torch.stack([b[1] for b in batches])  # (S, B)
    label = torch.stack([b[2] for b in batches])
    out = yz_logits(Y, Z, counts, query, normalize, residual)
    assert out.shape == (C, S, B, M)
    ce = cross_entropy(out, label)
    assert ce.shape == (C, S)
    for c in range(C):
        for s in range(S):
            one = yz_logits(Y[c, s], Z[c, s], counts[s], query[s], normalize, residual)
            torch.testing.assert_close(out[c, s], one, rtol=1e-6, atol=1e-6)
            lp = torch.log_softmax(one, -1)
            torch.testing.assert_close(ce[c, s], -lp[torch.arange(B), label[s]].mean(), rtol=1e-6, atol=1e-6)
    # the runs really differ (so the loop comparison would catch mixed-up indices)
    assert (out[0, 0] - out[1, 0]).abs().max() > 1e-3 and (out[0, 0] - out[0, 1]).abs().max() > 1e-3


def test_cross_entropy_matches_torch(dist):
    logits = _rand((20, dist.M), 10)
    label = torch.randint(dist.M, (20,), generator=torch.Generator().manual_seed(11))
    torch.testing.assert_close(cross_entropy(logits, label), torch.nn.functional.cross_entropy(logits, label))


def test_yzmodel_forward_matches_functional(dist):
    m = YZModel(dist.M, normalize=True, residual=True, generator=torch.Generator().manual_seed(1))
    x, _ = dist.sample_sequences(8, torch.Generator().manual_seed(2))
    torch.testing.assert_close(m(dist.counts_of(x), x[:, -1]), m.forward_tokens(x), rtol=1e-5, atol=1e-5)
    Y, Z = init_yz(dist.M, "default", torch.Generator().manual_seed(1))
    assert torch.equal(m.Y.data, Y) and torch.equal(m.Z.data, Z)


# --------------------------------------------------------------------------- original parameterisation
def test_original_model_norm_none_equals_reparameterised(dist):
    g = torch.Generator().manual_seed(20)
    model = OriginalAttentionModel(dist.M, d=7, norm="none", generator=g).double()
    x, _ = dist.sample_sequences(32, torch.Generator().manual_seed(21))
    Y, Z = model.reparameterised()
    assert Y.shape == Z.shape == (dist.M, dist.M) and Y.dtype == torch.float64
    out = model.forward_tokens(x)
    torch.testing.assert_close(out, yz_logits_tokens(Y, Z, x, normalize=False), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out, yz_logits(Y, Z, dist.counts_of(x).double(), x[:, -1], normalize=False),
                               rtol=1e-10, atol=1e-10)
    # Y and Z are the slide's products, written out
    U, WQ, WK, WV = (p.detach() for p in (model.U, model.W_Q, model.W_K, model.W_V))
    m, l = int(x[0, -1]), int(x[0, 0])
    assert math.isclose(float(Z[m, l]), float((U[m] @ WQ) @ (U[l] @ WK)), rel_tol=1e-10, abs_tol=1e-12)
    assert math.isclose(float(Y[l, m]), float(U[m] @ WV @ U[l]), rel_tol=1e-10, abs_tol=1e-12)


def _orthonormal_rows(M, d, seed):
    A = torch.randn(d, M, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    Q, _ = torch.linalg.qr(A)  # (d, M) orthonormal columns
    return Q.T.contiguous()  # (M, d) orthonormal rows


def test_original_model_l2_with_orthonormal_embeddings_equals_normalized(dist):
    M, d = dist.M, dist.M + 3
    model = OriginalAttentionModel(M, d=d, norm="l2", generator=torch.Generator().manual_seed(22)).double()
    with torch.no_grad():
        model.U.copy_(_orthonormal_rows(M, d, 23))
    torch.testing.assert_close(model.U @ model.U.T, torch.eye(M, dtype=torch.float64), rtol=0, atol=1e-12)
    x, _ = dist.sample_sequences(32, torch.Generator().manual_seed(24))
    Y, Z = model.reparameterised()
    out = model.forward_tokens(x)
    torch.testing.assert_close(out, yz_logits_tokens(Y, Z, x, normalize=True), rtol=1e-10, atol=1e-10)
    # and it is *not* the unnormalised model (the check distinguishes the two)
    assert (out - yz_logits_tokens(Y, Z, x, normalize=False)).abs().max() > 1e-3


def test_original_model_l2_needs_orthonormal_embeddings(dist):
    """With a generic U, ||Uᵀa|| != ||a|| and the l2 model is not the normalised Y/Z model."""
    M, d = dist.M, dist.M + 3
    model = OriginalAttentionModel(M, d=d, norm="l2", generator=torch.Generator().manual_seed(25)).double()
    x, _ = dist.sample_sequences(32, torch.Generator().manual_seed(26))
    Y, Z = model.reparameterised()
    assert (model.forward_tokens(x) - yz_logits_tokens(Y, Z, x, normalize=True)).abs().max() > 1e-4


def test_original_model_bad_arguments():
    with pytest.raises(ConfigError):
        OriginalAttentionModel(5, 3, norm="batchnorm")
    with pytest.raises(ConfigError):
        OriginalAttentionModel(0, 3)
    with pytest.raises(ConfigError):
        OriginalAttentionModel(5, 0)


# --------------------------------------------------------------------------- init
def test_zero_init():
    Y, Z = init_yz(9, "zero")
    assert Y.shape == Z.shape == (9, 9)
    assert (Y == 0).all() and (Z == 0).all()
    Y64, _ = init_yz(4, "zero", dtype=torch.float64)
    assert Y64.dtype == torch.float64


def test_default_init_is_linear_uniform():
    M = 40
    Y, Z = init_yz(M, "default", torch.Generator().manual_seed(0))
    bound = 1 / math.sqrt(M)
    for W in (Y, Z):
        assert W.shape == (M, M)
        assert W.abs().max() <= bound
        assert W.abs().max() > 0.95 * bound  # fills the range, not a narrower one
        assert abs(float(W.mean())) < 0.05 * bound
        # U(-b, b) has variance b²/3
        assert abs(float(W.var()) - bound**2 / 3) < 0.1 * bound**2 / 3
    assert not torch.equal(Y, Z)
    Y2, Z2 = init_yz(M, "default", torch.Generator().manual_seed(0))
    assert torch.equal(Y, Y2) and torch.equal(Z, Z2)
    Y3, _ = init_yz(M, "default", torch.Generator().manual_seed(1))
    assert not torch.equal(Y, Y3)


@pytest.mark.parametrize("bad", ["uniform", "", "Zero"])
def test_bad_init_name(bad):
    with pytest.raises(ConfigError):
        init_yz(5, bad)
    with pytest.raises(ConfigError):
        YZModel(5, init=bad)


def test_layernorm_original_model_runs_and_differs_from_l2():
    dist = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=3, num_distinct_per_next=4, T=9))
    x, _ = dist.sample_sequences(8, torch.Generator().manual_seed(3))
    ln = OriginalAttentionModel(dist.M, d=6, norm="layernorm", generator=torch.Generator().manual_seed(4))
    l2 = OriginalAttentionModel(dist.M, d=6, norm="l2", generator=torch.Generator().manual_seed(4))
    assert ln.forward_tokens(x).shape == (8, dist.M)
    assert not torch.allclose(ln.forward_tokens(x), l2.forward_tokens(x))
