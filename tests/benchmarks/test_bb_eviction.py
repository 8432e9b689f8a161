"""benchmarks/bb_eviction.py's measure: a dormant row's attention renormalised without BOS, split into the query
itself, the token before and the rest, with its entropy beside an even spread's."""
import math

import pytest
import torch


def test_rows_renormalised_without_bos_split_as_written(load_benchmark):
    bb = load_benchmark("bb_eviction")
    attn = torch.zeros(1, 4, 4)
    attn[0, 3] = torch.tensor([0.6, 0.1, 0.1, 0.2])  # query 3: BOS 0.6; without it 0.25 / 0.25 / 0.5 on keys 1..3
    dormant = torch.tensor([[False, False, False, True]])
    out = bb.without_bos(attn, dormant)
    assert out["self"] == pytest.approx(0.5) and out["before"] == pytest.approx(0.25)
    assert out["rest"] == pytest.approx(0.25)
    assert out["entropy"] == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    assert out["even_entropy"] == pytest.approx(math.log(3))
