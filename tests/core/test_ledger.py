"""The bandwidth ledger: the bytes a batch-1 decode step reads, counted from the modules by hand, under int8
weights and a sparse MLP's shares; the roofline and the yield from them."""
import math

import pytest
import torch

from attnlab.core.ledger import copy_bandwidth, ledger, weight_bytes
from attnlab.models import arch
from attnlab.quant.transform import QuantizedWeights
from tiny_models import tiny


def _by_hand(model) -> int:
    emb = model.get_input_embeddings()
    rest = sum(p.nbytes for n, p in model.named_parameters() if not n.endswith("embed_tokens.weight"))
    tied = model.lm_head.weight is emb.weight  # then named_parameters lists the matrix once, under embed_tokens
    return rest + emb.embedding_dim * 4 + (emb.weight.nbytes if tied else 0)


@pytest.mark.parametrize("tie", [False, True])
def test_a_step_reads_every_weight_once_and_one_embedding_row(tie):
    model = tiny("llama", 0, tie_word_embeddings=tie)
    assert weight_bytes(model) == _by_hand(model)


def test_int8_projections_count_at_their_own_bytes_and_a_sparse_mlp_at_its_share():
    model = tiny("llama", 0, hidden_size=64, intermediate_size=128)
    full = weight_bytes(model)
    mlp = [p for i in range(2) for p in arch.mlp(model, i)[1:4] if p is not None]
    half = weight_bytes(model, {p: 0.5 for p in mlp})
    assert full - half == sum(p.weight.nbytes for p in mlp) // 2
    with QuantizedWeights(model, "int8"):
        q = weight_bytes(model)
    assert q < full and weight_bytes(model) == full  # restored on exit
    linears = sum(m.weight.nbytes for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert full - q > 0.6 * linears  # int8 plus a scale per row: about a quarter of float32's bytes


def test_the_roofline_is_bandwidth_over_bytes_and_the_yield_its_share():
    model = tiny("llama", 0)
    bw = copy_bandwidth("cpu", mib=8, repeats=2)
    assert math.isfinite(bw) and bw > 1e8  # any machine copies faster than 100 MB/s
    line = ledger(model, tokens_per_s=50.0, kv_bytes=1000, bandwidth=1e9, extra_bytes=24)
    assert line["bytes_per_token"] == weight_bytes(model) + 1000 + 24
    assert line["roofline_tokens_per_s"] == pytest.approx(1e9 / line["bytes_per_token"])
    assert line["yield"] == pytest.approx(50.0 / line["roofline_tokens_per_s"])


def test_a_run_fed_many_tokens_a_forward_reads_its_bytes_once_for_all_of_them():
    model = tiny("llama", 0)
    one = ledger(model, tokens_per_s=50.0, kv_bytes=1000, bandwidth=1e9)
    chunked = ledger(model, tokens_per_s=50.0, kv_bytes=1000, bandwidth=1e9, tokens_per_forward=256)
    assert chunked["bytes_per_token"] == pytest.approx(one["bytes_per_token"] / 256)
    assert chunked["yield"] == pytest.approx(one["yield"] / 256) and chunked["tokens_per_forward"] == 256
