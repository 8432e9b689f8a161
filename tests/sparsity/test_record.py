"""SparsityRecord's exact-zero share of h, through layer_profile and `attnlab sparsity`'s result lines,
against hand counts from the layers' own weights on tiny Llamas with a ReLU and a SiLU gate."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.models.trace import Trace
from attnlab.sparsity.measure import layer_profile, perplexity
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.record import SparsityRecord
from attnlab.sparsity.rules import CATS, Oracle
from attnlab.sparsity.summary import result_lines
from tiny_models import V, tiny


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, V, (48,), generator=torch.Generator().manual_seed(3))


@torch.no_grad()
def _hand_zeros(model, ids) -> list[int]:
    """Per layer, the entries of h = act(gate(x)) * up(x) that are exactly 0, from the dense model's MLP
    inputs x and the layer's weights (no module forward)."""
    act = {"relu": F.relu, "silu": F.silu}[model.config.hidden_act]
    n = model.config.num_hidden_layers
    with Trace(model, ["blocks.*.mlp.in"]) as tr:
        model(ids[None], use_cache=False)
        xs = [tr[f"blocks.{i}.mlp.in"][0] for i in range(n)]  # (T, d) each
    counts = []
    for i, x in enumerate(xs):
        mlp = model.model.layers[i].mlp
        h = act(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T)  # (T, d_ff)
        counts.append(int((h == 0).sum()))
    return counts


def _profile(model, ids, rule) -> dict:
    record = SparsityRecord()
    with SparseMLP(model, rule, record=record):
        perplexity(model, ids, window=ids.numel())
    return layer_profile(record)


def test_a_relu_models_zero_share_is_the_hand_count_of_zeros_of_h(ids):
    model = tiny("llama", 1, hidden_act="relu")
    d_ff = model.config.intermediate_size
    zeros = _hand_zeros(model, ids)
    p = _profile(model, ids, Oracle(1.0))  # keep 1: every layer sees the dense model's input
    assert p["zero"] == [z / (ids.numel() * d_ff) for z in zeros]
    assert p["overall_zero"] == sum(zeros) / (len(zeros) * ids.numel() * d_ff)
    assert 0.3 < p["overall_zero"] < 0.7  # random weights: about half of gate(x) is negative
    # at keep 0.5 the share is still the dense h's (counted before the mask): layer 0 sees the dense input
    assert _profile(model, ids, Oracle(0.5))["zero"][0] == p["zero"][0]


def test_a_silu_models_h_has_no_exact_zeros_even_when_half_is_masked(ids):
    model = tiny("llama", 1, hidden_act="silu")
    assert _hand_zeros(model, ids) == [0, 0]
    p = _profile(model, ids, Oracle(0.5))
    assert p["zero"] == [0.0, 0.0] and p["overall_zero"] == 0.0 and p["overall_kept"] == 0.5


def test_without_values_the_zero_share_is_unknown_and_the_result_line_shows_it(ids):
    model = tiny("llama", 1, hidden_act="relu")
    record = SparsityRecord()
    with SparseMLP(model, CATS({0: 0.01, 1: 0.01}, 0.5), mode="gather", record=record):  # CATS never forms h
        model(ids[None], use_cache=False)
    assert math.isnan(record.zero_share()) and math.isnan(record.as_dict()["h"]["0"]["zero"])
    p = _profile(model, ids, Oracle(0.5))
    m = {"dense_ppl": 10.0, "rule": "oracle", "keep": 0.5, "heads_keep": None, "sparse_ppl": 11.0,
         "ppl_increase": 0.1, "profile": p, "cosine_per_layer": [0.9, 0.8], "overlap_per_layer": [0.6, 0.7]}
    assert f"entries of h exactly zero {p['overall_zero']:.1%}" in result_lines(m)[1]
