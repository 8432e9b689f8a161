"""core.fit: the power-law fit recovers a planted exponent, reads R², and chooses the head it says."""
import math

import pytest
import torch

from attnlab.core.fit import power_law_fit, rank_frequency


@pytest.mark.parametrize("a", [0.7, 1.0, 1.8])
def test_recovers_a_known_exponent_from_noisy_shuffled_data(a):
    g = torch.Generator().manual_seed(0)
    n = 5000
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    values = 3.0 * ranks ** -a * torch.exp(0.05 * torch.randn(n, generator=g, dtype=torch.float64))
    values = values[torch.randperm(n, generator=g)]  # the fit must sort them itself
    fit = power_law_fit(values, head=0.2)
    assert fit.exponent == pytest.approx(a, abs=0.03)
    assert fit.intercept == pytest.approx(math.log(3.0), abs=0.1)
    assert fit.r2 > 0.98
    assert (fit.ranks, fit.n) == (1000, n)


def test_exact_power_law_is_exact():
    values = 100 * torch.arange(1, 1001, dtype=torch.float64) ** -1.5
    fit = power_law_fit(values, head=1.0)
    assert fit.exponent == pytest.approx(1.5, abs=1e-9)
    assert fit.intercept == pytest.approx(math.log(100), abs=1e-9)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)


def test_flat_distribution_gives_a_small_exponent():
    g = torch.Generator().manual_seed(1)
    values = 0.9 + 0.2 * torch.rand(2000, generator=g)
    assert abs(power_law_fit(values, head=0.5).exponent) < 0.1
    assert power_law_fit(torch.ones(50), head=1.0).exponent == 0.0


def test_head_and_non_positive_values():
    values = torch.tensor([0.0, -1.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.1, 0.05, 0.01])
    assert rank_frequency(values).tolist() == pytest.approx([5, 4, 3, 2, 1, 0.5, 0.25, 0.1, 0.05, 0.01])
    fit = power_law_fit(values, head=0.25)
    assert (fit.ranks, fit.n) == (3, 10)  # ceil(0.25 * 10) = 3 of the 10 positive values
    assert power_law_fit(values, head=0.01).ranks == 3  # at least min_ranks
    with pytest.raises(ValueError, match="positive values"):
        power_law_fit(torch.tensor([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="head"):
        power_law_fit(values, head=0.0)
