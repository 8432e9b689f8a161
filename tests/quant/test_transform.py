"""QuantizedWeights: reversible, composing with every KV policy and with SparseMLP, refusing bad input."""
import pytest
import torch
from torch import nn

from attnlab.core import int8, weights
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.models import arch
from attnlab.quant.schemes import SCHEMES
from attnlab.quant.transform import QuantizedWeights, projections
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.rules import CATS, TEAL, Oracle
from tiny_models import ARCHS, random_ids, tiny

T = 12


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("name", ARCHS)
def test_every_projection_is_quantized_inside_and_the_model_restored_bit_for_bit(name):
    model, ids = tiny(name), random_ids(T)[None]
    before, state = _logits(model, ids), {k: v.clone() for k, v in model.state_dict().items()}
    projs = projections(model)
    n_layers = len(arch.layers(model))
    assert len(projs) >= 4 * n_layers + 1 and arch.lm_head(model) in projs
    with QuantizedWeights(model, "int8"):
        assert all(isinstance(weights.of(p), int8.Int8Weight) for p in projs)
        inside = _logits(model, ids)
    assert not torch.equal(inside, before)  # int8 really computed
    torch.testing.assert_close(inside, before, atol=0.05, rtol=0.05)
    assert all(not hasattr(p, weights.ATTR) and "forward" not in p.__dict__ for p in projs)
    assert torch.equal(_logits(model, ids), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", ARCHS)
def test_each_projection_inside_computes_the_int8_product(name):
    model = tiny(name)
    with QuantizedWeights(model):
        for p in projections(model):
            x = torch.randn(3, arch.weight(p).shape[1])
            torch.testing.assert_close(p(x), int8.linear(x, weights.of(p), p.bias))


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("policy", POLICIES.names())
def test_a_budget_covering_the_stream_equals_the_quantized_forward_for_every_policy(name, policy):
    model, ids = tiny(name), random_ids(T, seed=3)[None]
    with QuantizedWeights(model):
        ref = _logits(model, ids)
        cache = PolicyCache(model, make_policy(policy, T + 5, n_sink=2), "original")
        with cache, torch.no_grad():
            out = torch.cat([model(ids[:, t:t + 1], past_key_values=cache).logits for t in range(T)], 1)
    # token by token vs all at once: the same int8 products, bf16-rounded alike, summed in another order
    torch.testing.assert_close(out, ref, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("name", ARCHS)
def test_quantized_weights_compose_with_an_evicting_cache_and_both_restore(name):
    model, ids = tiny(name), random_ids(T, seed=4)[None]
    before = _logits(model, ids)
    with QuantizedWeights(model):
        cache = PolicyCache(model, make_policy("sinks+h2o", 6, n_sink=2, recent=2), "original")
        with cache, torch.no_grad():
            for t in range(T):
                model(ids[:, t:t + 1], past_key_values=cache)
    assert torch.equal(_logits(model, ids), before)


def _rules():
    return {"oracle": Oracle(0.5), "cats": CATS({0: 0.1, 1: 0.1}), "teal": TEAL({0: 0.3, 1: 0.3}, {0: 0.1, 1: 0.1})}


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("rule", ["oracle", "cats", "teal"])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("scheme", ["int8", "w8a8", "smoothquant", "bf16"])
def test_quantized_gather_equals_quantized_mask(name, rule, rows, scheme):
    model, ids = tiny(name), random_ids(T, seed=5)
    r = _rules()[rule]
    x = ids.view(-1)[:rows * 4].view(rows, 4)  # batch of `rows` sequences
    with QuantizedWeights(model, scheme, calibration=random_ids(16, seed=9)):  # smoothquant reads it
        with SparseMLP(model, r, mode="mask"):
            masked = _logits(model, x)
        with SparseMLP(model, r, mode="gather"):
            gathered = _logits(model, x)
            steps = [_logits(model, x[:, :1])]  # one token: the per-token gather path
        with SparseMLP(model, r, mode="mask"):
            steps.append(_logits(model, x[:, :1]))
    torch.testing.assert_close(gathered, masked, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(steps[0], steps[1], atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("name", ARCHS)
def test_sparse_mlp_inside_reads_int8_and_hands_the_int8_forwards_back(name):
    model, ids = tiny(name), random_ids(T, seed=6)[None]
    with QuantizedWeights(model):
        quantized = _logits(model, ids)
        with SparseMLP(model, Oracle(1.0), mode="gather"):
            kept_all = _logits(model, ids)
        assert all(isinstance(p.__dict__.get("forward"), weights.QuantForward) for p in projections(model))
        assert torch.equal(_logits(model, ids), quantized)
    torch.testing.assert_close(kept_all, quantized, atol=2e-3, rtol=2e-3)


def test_an_unknown_scheme_is_one_line_naming_the_choices():
    with pytest.raises(UsageError, match="unknown weight quantization 'int3': did you mean 'int[48]'"):
        QuantizedWeights(tiny("llama"), "int3")
    assert {"int8", "int4"} <= set(SCHEMES.names())  # each scheme a file of attnlab/quant/schemes/, found


def test_quantizing_twice_is_refused_and_the_first_stays_whole():
    model, ids = tiny("llama"), random_ids(T)[None]
    with QuantizedWeights(model):
        inside = _logits(model, ids)
        with pytest.raises(UsageError, match="already quantized"):
            QuantizedWeights(model)
        assert torch.equal(_logits(model, ids), inside)


def test_a_model_without_known_projections_is_refused():
    class Plain(nn.Module):
        config = type("C", (), {"model_type": "bert"})()

    with pytest.raises(UsageError, match="not in attnlab's architecture table"):
        QuantizedWeights(Plain())


def test_a_forward_replaced_before_is_refused_cached_mode_too():
    model = tiny("opt")  # OPT's inline MLP: SparseMLP replaces fc1's forward itself
    with SparseMLP(model, Oracle(0.5), mode="gather"):
        with pytest.raises(UsageError, match="enter QuantizedWeights first"):
            QuantizedWeights(model)
    with QuantizedWeights(model):
        with pytest.raises(UsageError, match="use mode gather"):
            SparseMLP(model, Oracle(0.5), mode="cached")
