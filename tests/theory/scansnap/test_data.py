"""Scan&Snap sequence-class distribution: token layout, P(l|n), and the two samplers.

The count sampler (conditional binomials) must equal, in distribution, counting the
tokens of explicit sequences; both must match the exact multinomial moments.
"""
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binom, chi2_contingency, chisquare

from attnlab.core.errors import ConfigError, UsageError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution


# --------------------------------------------------------------------------- layout
@pytest.mark.parametrize("num_last", [1, 3, 5, 10])
def test_vocabulary_size_follows_the_authors_layout(num_last):
    d = SeqClassDistribution(SeqClassConfig(num_last=num_last))
    K = 2 * num_last
    assert d.K == K
    assert d.M == 10 + 10 * K + num_last + K
    assert d.M == {1: 33, 3: 79, 5: 125, 10: 240}[num_last]


@pytest.mark.parametrize("num_last", [1, 3])
def test_probabilities_and_token_roles(num_last):
    d = SeqClassDistribution(SeqClassConfig(num_last=num_last))
    K, M = d.K, d.M
    assert d.P.shape == (K, M) and d.P.dtype == torch.float64
    torch.testing.assert_close(d.P.sum(1), torch.ones(K, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (d.P >= 0).all()

    # 10 commons with weight 1, distinct weights linspace(0.1, 1, 10): normaliser 10 + 5.5
    Z = 15.5
    assert d.common.tolist() == list(range(10))
    torch.testing.assert_close(d.P[:, d.common], torch.full((K, 10), 1 / Z, dtype=torch.float64))
    w = torch.tensor(np.linspace(0.1, 1.0, 10) / Z, dtype=torch.float64)
    for n in range(K):
        torch.testing.assert_close(d.P[n, d.distinct[n]], w, rtol=0, atol=1e-15)
        # support = commons + own distincts; nothing else has mass
        on = torch.zeros(M, dtype=torch.bool)
        on[d.common] = True
        on[d.distinct[n]] = True
        assert (d.P[n, ~on] == 0).all()
        assert (d.P[n, on] > 0).all()
        assert sorted(d.support[n].tolist()) == sorted(torch.nonzero(on).flatten().tolist())
        torch.testing.assert_close(d.P[n, d.support[n]], d.support_P[n])

    # distinct tokens are owned by one class each, and the blocks tile 10..10+10K
    flat = d.distinct.flatten().tolist()
    assert len(set(flat)) == len(flat) == 10 * K
    assert sorted(flat) == list(range(10, 10 + 10 * K))

    # ψ is many-to-one: each query token has exactly num_next_per_last = 2 classes
    assert d.query_ids.numel() == num_last
    assert torch.unique(d.query).numel() == num_last
    groups = d.classes_of_query()
    assert [len(g) for g in groups] == [2] * num_last
    for m, g in zip(d.query_ids, groups):
        assert (d.query[g] == m).all()
    assert sorted(torch.cat(groups).tolist()) == list(range(K))

    # labels (next tokens) are distinct, and queries / labels are never contextual tokens
    assert torch.unique(d.label).numel() == K
    special = set(d.query_ids.tolist()) | set(d.label.tolist())
    assert len(special) == num_last + K
    assert not special & set(d.support.flatten().tolist())
    assert max(special) == M - 1
    assert (d.P[:, d.query_ids] == 0).all() and (d.P[:, d.label] == 0).all()


def test_per_query_common_tokens_are_shared_within_one_query_only():
    d = SeqClassDistribution(SeqClassConfig(num_last=2, num_common=1, num_common_per_last=3, num_distinct_per_next=2))
    # weights: 1 common + 3 per-query commons (weight 1 each) + linspace(0.1, 1, 2)
    norm = 4.0 + 1.1
    (g0, g1) = d.classes_of_query()
    sup = [set(torch.nonzero(d.P[n] > 0).flatten().tolist()) for n in range(d.K)]
    shared0 = sup[g0[0]] & sup[g0[1]]
    shared1 = sup[g1[0]] & sup[g1[1]]
    assert len(shared0) == len(shared1) == 1 + 3
    assert shared0 & shared1 == {0}  # only the global common is shared across queries
    for n in range(d.K):
        for l in sup[n] - set(d.distinct[n].tolist()):
            assert math.isclose(float(d.P[n, l]), 1 / norm, rel_tol=1e-12)
        torch.testing.assert_close(d.P[n].sum(), torch.tensor(1.0, dtype=torch.float64))


# --------------------------------------------------------------------------- samplers
SMALL = SeqClassConfig(num_last=1, num_common=2, num_distinct_per_next=3, T=16)
N = 20000


@pytest.fixture(scope="module")
def samples():
    d = SeqClassDistribution(SMALL)
    counts, query, y = d.sample_counts(N, torch.Generator().manual_seed(11))
    x, y_seq = d.sample_sequences(N, torch.Generator().manual_seed(12))
    return d, {"counts": (counts, query, y), "sequences": (x, y_seq, d.counts_of(x))}


def _class_of(d, y):
    n = y - d.label[0]
    assert (d.label[n] == y).all()
    return n


def _by_sampler(d, samples):
    c, _, y = samples["counts"]
    _, y2, c2 = samples["sequences"]
    return {"counts": (c.double(), _class_of(d, y)), "sequences": (c2.double(), _class_of(d, y2))}


def test_sample_shapes_types_and_support(samples):
    d, s = samples
    counts, query, y = s["counts"]
    x, y_seq, c_seq = s["sequences"]
    assert counts.shape == (N, d.M) and counts.dtype == torch.float32
    assert x.shape == (N, SMALL.T) and x.dtype == torch.long
    assert c_seq.shape == (N, d.M)
    for c, n in _by_sampler(d, s).values():
        assert (c == c.round()).all() and (c >= 0).all()
        assert (c.sum(1) == SMALL.T - 1).all()
        off = d.P[n] == 0  # (N, M): tokens off the class support
        assert (c[off] == 0).all()
        assert (c[:, d.query_ids] == 0).all()  # the query token is not a contextual token
        assert (torch.bincount(n, minlength=d.K) > 0.45 * N).all()  # classes ~uniform
    # the query column is the class's query token
    assert (query == d.query[_class_of(d, y)]).all()
    assert (x[:, -1] == d.query[_class_of(d, y_seq)]).all()
    # contextual tokens of the explicit sequences lie on the class support
    n_seq = _class_of(d, y_seq)
    assert (d.P[n_seq[:, None], x[:, :-1]] > 0).all()


@pytest.mark.parametrize("sampler", ["counts", "sequences"])
def test_per_class_moments_match_the_exact_multinomial(samples, sampler):
    d, s = samples
    c, n = _by_sampler(d, s)[sampler]
    Tm1 = SMALL.T - 1
    for k in range(d.K):
        sel = c[n == k]
        nk = sel.shape[0]
        p = d.P[k]
        mean = Tm1 * p
        cov = Tm1 * (torch.diag(p) - torch.outer(p, p))
        se_mean = (cov.diagonal() / nk).sqrt()
        assert ((sel.mean(0) - mean).abs() <= 5 * se_mean + 1e-12).all(), sampler
        # covariance: each entry is the mean of (x_i - mu_i)(x_j - mu_j); its SE from the sample
        dev = sel - mean
        prod = dev[:, :, None] * dev[:, None, :]  # (nk, M, M)
        est = prod.mean(0)
        se_cov = prod.std(0) / math.sqrt(nk)
        assert ((est - cov).abs() <= 5 * se_cov + 1e-12).all(), sampler
        # and the sample covariance has the multinomial's rank deficiency: rows sum to 0
        torch.testing.assert_close(torch.cov(sel.T).sum(1), torch.zeros(d.M, dtype=torch.float64),
                                   rtol=0, atol=1e-9)


def test_two_sample_chi_square_on_one_token_count(samples):
    d, s = samples
    by = _by_sampler(d, s)
    tok = int(d.distinct[0, 1])  # a distinct token of class 0 (0 for every class-1 sample)
    a = by["counts"][0][:, tok].long()
    b = by["sequences"][0][:, tok].long()
    top = int(max(a.max(), b.max())) + 1
    table = np.stack([np.bincount(a.numpy(), minlength=top), np.bincount(b.numpy(), minlength=top)])
    # merge the sparse tail so every expected cell is >= 5
    cols, acc = [], np.zeros(2, dtype=np.int64)
    for j in range(top):
        acc = acc + table[:, j]
        if acc.sum() >= 40:
            cols.append(acc)
            acc = np.zeros(2, dtype=np.int64)
    if acc.sum():
        cols[-1] = cols[-1] + acc
    merged = np.stack(cols, 1)
    assert merged.shape[1] >= 4
    assert chi2_contingency(merged).pvalue > 1e-3


@pytest.mark.parametrize("sampler", ["counts", "sequences"])
def test_one_token_count_is_binomial(samples, sampler):
    """Marginally, the count of token l given class n is Binomial(T-1, P(l|n))."""
    d, s = samples
    c, n = _by_sampler(d, s)[sampler]
    tok = int(d.distinct[1, 2])
    x = c[n == 1, tok].long().numpy()
    Tm1, p = SMALL.T - 1, float(d.P[1, tok])
    k = np.arange(Tm1 + 1)
    expected = binom.pmf(k, Tm1, p) * len(x)
    observed = np.bincount(x, minlength=Tm1 + 1).astype(float)
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    exp *= obs.sum() / exp.sum()
    assert chisquare(obs, exp).pvalue > 1e-3


def test_moment_check_has_power_against_a_wrong_distribution():
    """The same moment test rejects counts drawn with other weights (it can fail)."""
    d = SeqClassDistribution(SMALL)
    wrong = SeqClassDistribution(replace(SMALL, distinct_weight_min=0.6))
    c, _, y = wrong.sample_counts(N, torch.Generator().manual_seed(3))
    sel = c[y == d.label[0]].double()
    p = d.P[0]
    se = ((SMALL.T - 1) * p * (1 - p) / sel.shape[0]).sqrt()
    assert ((sel.mean(0) - (SMALL.T - 1) * p).abs() > 5 * se + 1e-12).any()


def test_samplers_are_reproducible_from_the_generator():
    d = SeqClassDistribution(SMALL)
    a = d.sample_counts(64, torch.Generator().manual_seed(5))
    b = d.sample_counts(64, torch.Generator().manual_seed(5))
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    x1, _ = d.sample_sequences(64, torch.Generator().manual_seed(5))
    x2, _ = d.sample_sequences(64, torch.Generator().manual_seed(5))
    assert torch.equal(x1, x2)


def test_counts_of_counts_only_contextual_tokens():
    d = SeqClassDistribution(SMALL)
    q = int(d.query_ids[0])
    x = torch.tensor([[0, 0, 3, 1, q], [2, 2, 2, 2, q]])
    c = d.counts_of(x)
    expect = torch.zeros(2, d.M)
    expect[0, 0], expect[0, 3], expect[0, 1] = 2, 1, 1
    expect[1, 2] = 4
    assert torch.equal(c, expect)


def test_zero_weight_tokens_are_never_drawn():
    cfg = SeqClassConfig(num_last=1, num_common=1, num_distinct_per_next=3, distinct_weight_min=0.0, T=9)
    d = SeqClassDistribution(cfg)
    zero_tok = d.distinct[:, 0]
    assert (d.P[torch.arange(d.K), zero_tok] == 0).all()
    c, _, y = d.sample_counts(4000, torch.Generator().manual_seed(0))
    assert (c[:, zero_tok] == 0).all() and (c.sum(1) == cfg.T - 1).all()
    x, _ = d.sample_sequences(4000, torch.Generator().manual_seed(0))
    assert not torch.isin(x, zero_tok).any()


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_last=0),
        dict(num_next_per_last=0),
        dict(T=1),
        dict(T=0),
        dict(common_weight=-1.0),
        dict(distinct_weight_min=-0.1),
        dict(distinct_weight_min=-2.0, distinct_weight_max=-1.0),
        dict(num_common=-1),
        dict(num_common=0, num_distinct_per_next=0),
        dict(distinct_weight_min=1.0, distinct_weight_max=0.5),
    ],
)
def test_bad_configs_raise_config_error(kwargs):
    with pytest.raises(ConfigError) as e:
        SeqClassConfig(**kwargs)
    assert isinstance(e.value, UsageError) and isinstance(e.value, ValueError)
    assert str(e.value)


def test_all_zero_weights_raise_config_error():
    with pytest.raises(ConfigError):
        SeqClassDistribution(SeqClassConfig(num_common=0, distinct_weight_min=0.0, distinct_weight_max=0.0))


def test_good_edge_configs_are_accepted():
    d = SeqClassDistribution(SeqClassConfig(num_common=0, T=2))
    assert (d.sample_counts(16, torch.Generator().manual_seed(0))[0].sum(1) == 1).all()
