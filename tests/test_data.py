"""The sequence-class distribution: layout, and the two samplers equal in distribution."""
import math

import pytest
import torch
from scipy.stats import chi2_contingency

from attnlab.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution


@pytest.mark.parametrize("num_last,M", [(1, 33), (3, 79), (5, 125), (10, 240)])
def test_layout_matches_authors(num_last, M):
    d = SeqClassDistribution(SeqClassConfig(num_last=num_last))
    assert d.M == M and d.K == 2 * num_last
    assert torch.allclose(d.P.sum(1), torch.ones(d.K, dtype=torch.float64))
    assert torch.allclose(d.P[:, d.common], torch.full((d.K, 10), 1 / 15.5, dtype=torch.float64))
    w = torch.linspace(0.1, 1.0, 10, dtype=torch.float64) / 15.5
    for n in range(d.K):
        assert torch.allclose(d.P[n, d.distinct[n]], w)
        others = d.distinct[torch.arange(d.K) != n].flatten()
        assert (d.P[n, others] == 0).all()  # distinct tokens belong to one class only
    assert len(set(d.label.tolist())) == d.K
    assert (d.query[0::2] == d.query[1::2]).all()  # ψ many-to-one: two classes per query


def test_count_sampler_equals_sequence_sampler_in_distribution():
    cfg = SeqClassConfig(num_last=1, num_common=2, num_distinct_per_next=3, T=16)
    d = SeqClassDistribution(cfg)
    N = 20000
    c_fast, q_fast, y_fast = d.sample_counts(N, torch.Generator().manual_seed(1))
    x, y_seq = d.sample_sequences(N, torch.Generator().manual_seed(2))
    c_seq = d.counts_of(x).double()
    c_fast = c_fast.double()
    assert (c_fast.sum(1) == cfg.T - 1).all() and (c_seq.sum(1) == cfg.T - 1).all()
    for counts, label in ((c_fast, y_fast), (c_seq, y_seq)):
        n = label - d.label[0]
        for k in range(d.K):
            sel = counts[n == k]
            off = torch.ones(d.M, dtype=torch.bool)
            off[d.support[k]] = False
            assert (sel[:, off] == 0).all()  # nothing off the class support
            p = d.P[k]
            mean_exact = (cfg.T - 1) * p
            cov_exact = (cfg.T - 1) * (torch.diag(p) - torch.outer(p, p))
            se = (cov_exact.diagonal() / sel.shape[0]).sqrt()
            assert ((sel.mean(0) - mean_exact).abs() <= 5 * se + 1e-12).all()
            v = cov_exact.diagonal()
            se_cov = ((torch.outer(v, v) + cov_exact**2) / sel.shape[0]).sqrt()  # normal-theory SE
            assert ((torch.cov(sel.T) - cov_exact).abs() <= 5 * se_cov + 1e-12).all()
    # the query column: the class's query token
    assert (q_fast == d.query[y_fast - d.label[0]]).all()
    assert (x[:, -1] == d.query[y_seq - d.label[0]]).all()
    # two-sample chi-square on the count of the rarest distinct token of class 0
    tok = int(d.distinct[0, 0])
    a = c_fast[y_fast == d.label[0], tok].long()
    b = c_seq[y_seq == d.label[0], tok].long()
    top = int(max(a.max(), b.max())) + 1
    table = torch.stack([torch.bincount(a, minlength=top), torch.bincount(b, minlength=top)])
    table = table[:, table.sum(0) > 0]
    assert chi2_contingency(table.numpy()).pvalue > 1e-3


def test_count_sampler_detects_a_wrong_distribution():
    """The moment check above can fail: a sampler with other weights is caught."""
    d = SeqClassDistribution(SeqClassConfig(num_distinct_per_next=3, num_common=2, T=16))
    other = SeqClassDistribution(SeqClassConfig(num_distinct_per_next=3, num_common=2, T=16, distinct_weight_min=0.5))
    c, _, y = other.sample_counts(20000, torch.Generator().manual_seed(0))
    sel = c[y == d.label[0]].double()
    se = ((15 * d.P[0] * (1 - d.P[0])) / sel.shape[0]).sqrt()
    assert ((sel.mean(0) - 15 * d.P[0]).abs() > 5 * se + 1e-12).any()


@pytest.mark.parametrize(
    "kwargs", [dict(num_last=0), dict(num_next_per_last=0), dict(T=1), dict(common_weight=-1.0),
               dict(num_common=0, num_distinct_per_next=0), dict(distinct_weight_min=2.0)]
)
def test_bad_configs_raise(kwargs):
    with pytest.raises(ConfigError):
        SeqClassConfig(**kwargs)
