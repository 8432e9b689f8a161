"""Attention variants for sinks from scratch: the normalisers equal their formulas, each variant reduces
to vanilla where it should, streams through the evicting cache as it computes densely, and reloads."""
import math

import pytest
import torch
from transformers import LlamaForCausalLM

from attnlab.core.attention import eager_attention, sink_softmax
from attnlab.core.errors import UsageError
from attnlab.core.metrics import position_norm_ratio, sink_importance, sink_rate
from attnlab.core.variant_names import VARIANTS
from attnlab.evals.inputs import with_sink
from attnlab.evals.streaming import stream_nll
from attnlab.kv.cache import PolicyCache, check_sink_slot
from attnlab.kv.policies import make_policy
from attnlab.models.causal_lm import LlamaLMConfig, build_llama, load_causal_lm

V = 40  # vocabulary; the sink token is its last entry


def tiny(attention: str = "softmax", seed: int = 0, n_layers: int = 2, **kw):
    torch.manual_seed(seed)
    cfg = LlamaLMConfig(vocab_size=V, d_model=32, n_layers=n_layers, n_heads=4, n_kv_heads=2, d_ffn=48, max_len=128,
                        attention=attention, sink_token_id=V - 1 if attention == "sink-token" else None, **kw)
    return build_llama(cfg).eval()


def plain_twin(model) -> LlamaForCausalLM:
    """A vanilla LlamaForCausalLM with the variant's shared weights (its extra parameters left out)."""
    cfg = LlamaLMConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ffn=48, max_len=128)
    twin = LlamaForCausalLM(cfg.to_hf()).eval()
    missing, unexpected = twin.load_state_dict(model.hf.state_dict(), strict=False)
    assert missing == [] and all(".sinks" in k or ".gate." in k for k in unexpected)
    return twin


# --------------------------------------------------------------------------- the normaliser
def test_softmax1_equals_its_formula():
    x = torch.randn(2, 3, 5, 7)
    expected = x.exp() / (1 + x.exp().sum(-1, keepdim=True))
    torch.testing.assert_close(sink_softmax(x, torch.zeros(3)), expected)


def test_softmax1_tends_to_softmax_as_logits_grow():
    x = torch.randn(1, 2, 4, 6, generator=torch.Generator().manual_seed(0))
    gaps = [(sink_softmax(x + c, torch.zeros(2)) - x.softmax(-1)).abs().max().item() for c in (0.0, 2.0, 4.0, 8.0)]
    assert gaps[0] > 0.01 and gaps[0] > gaps[1] > gaps[2] > gaps[3] and gaps[3] < 1e-4  # the gap is p/(1 + Σe^x)


def test_sink_logit_rows_sum_below_one_and_a_masked_row_goes_to_the_sink():
    x = torch.randn(1, 2, 3, 4)
    x[0, 0, 0] = float("-inf")  # a fully masked row
    p = sink_softmax(x, torch.tensor([0.5, -1.0]))
    assert torch.isfinite(p).all() and (p.sum(-1) < 1).all() and p[0, 0, 0].sum() == 0
    torch.testing.assert_close(sink_softmax(x[:, 1:], torch.tensor([float("-inf")])), x[:, 1:].softmax(-1))


def test_eager_attention_matches_sdpa_for_grouped_queries():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    out, probs = eager_attention(q, k, v, 8 ** -0.5, causal)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, ref)
    assert probs.shape == (2, 4, 5, 5) and torch.allclose(probs.sum(-1), torch.ones(2, 4, 5))


# --------------------------------------------------------------------------- each variant vs vanilla
def test_sink_logit_at_minus_infinity_is_vanilla():
    model = tiny("sink-logit")
    for layer in model.hf.model.layers:
        layer.self_attn.sinks.data.fill_(float("-inf"))
    x = torch.randint(0, V, (2, 12))
    torch.testing.assert_close(model.hf(x).logits, plain_twin(model)(x).logits)


def test_gate_of_one_is_vanilla():
    model = tiny("gated")
    for layer in model.hf.model.layers:
        layer.self_attn.gate.weight.data.zero_()
        layer.self_attn.gate.bias.data.fill_(100.0)  # sigmoid(100) == 1 in float32
    x = torch.randint(0, V, (2, 12))
    torch.testing.assert_close(model.hf(x).logits, plain_twin(model)(x).logits)


def test_softmax1_differs_from_vanilla_and_learns_no_parameter():
    model = tiny("softmax1")
    x = torch.randint(0, V, (1, 12))
    assert not torch.allclose(model.hf(x).logits, plain_twin(model)(x).logits, atol=1e-4)
    assert not any(".sinks" in k for k, _ in model.hf.named_parameters())  # the zero logit is a constant


@pytest.mark.parametrize("variant", VARIANTS)
def test_maps_forward_equals_fast_forward(variant):
    """The trainer's probe (eager maps) and its training steps (fused where possible) compute one function."""
    model = tiny(variant)
    x = torch.randint(0, V - 1, (2, 10))
    fast, _ = model(x, attentions=False)
    slow, maps = model(x, attentions=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    total = maps[0].sum(-1)
    if variant == "relu":  # relu(x) / n: rows need not sum to 1, and no weight is negative
        assert (maps[0] >= 0).all() and not torch.allclose(total, torch.ones_like(total))
    elif variant in ("softmax1", "sink-logit"):
        assert (total < 1).all()
    else:
        assert torch.allclose(total, torch.ones_like(total))


@pytest.mark.parametrize("variant", VARIANTS)
def test_reloads_from_its_checkpoint_with_identical_logits(variant, tmp_path):
    model = tiny(variant)
    if variant == "sink-logit":  # a learned value, not the init
        for i, layer in enumerate(model.hf.model.layers):
            layer.self_attn.sinks.data = torch.linspace(-1, 1, 4) * (i + 1)
    model.save_pretrained(tmp_path / "m")
    again = load_causal_lm(tmp_path / "m").eval()
    assert again.hf.config.attention_variant == variant if variant != "softmax" else type(again.hf) is LlamaForCausalLM
    x = torch.randint(0, V, (2, 9))
    torch.testing.assert_close(again.hf(x).logits, model.hf(x).logits, atol=0, rtol=0)


# --------------------------------------------------------------------------- through the evicting cache
def dense_nll(model, ids: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(model(ids[None]).logits[0, :-1].double(), -1)
    return -logp.gather(-1, ids[1:, None])[:, 0]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("policy", ["sinks", "sinks+h2o"])
def test_streaming_nll_equals_dense_while_nothing_is_evicted(variant, policy):
    """Token by token through the evicting cache (SDPA path for sinks, the scored path for H2O) with a
    budget the stream never reaches: the same NLL as one dense forward, the sink token included."""
    model = tiny(variant).hf
    ids = with_sink(model, torch.randint(0, V - 1, (24,)))
    assert (ids[0] == V - 1) == (variant == "sink-token")
    cache = PolicyCache(model, make_policy(policy, 64, n_sink=1, recent=8), positions="rolling")
    got = stream_nll(model, ids, cache, chunk=1).nll
    torch.testing.assert_close(torch.from_numpy(got), dense_nll(model, ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["softmax1", "sink-logit"])
def test_evicting_cache_applies_the_variants_normaliser(variant):
    """Under eviction the kept slots are a window: in a one-layer model (deeper, a kept token's keys carry
    the context it was computed in) each step equals a dense forward over exactly the kept tokens at their
    rolled positions, with the sink logit in the denominator."""
    model = tiny(variant, n_layers=1).hf
    for i, layer in enumerate(model.model.layers):
        if variant == "sink-logit":
            layer.self_attn.sinks.data = torch.tensor([1.5, -0.5, 0.0, 2.0]) * (i + 1)
    ids = torch.randint(0, V, (20,))
    window = 6
    got = stream_nll(model, ids, PolicyCache(model, make_policy("window", window), positions="rolling")).nll
    for t in (10, 15, 18):  # token t+1 from the `window` kept tokens and token t, at positions 0..window
        ctx = ids[t - window: t + 1]
        ref = -torch.log_softmax(model(ctx[None]).logits[0, -1].double(), -1)[ids[t + 1]]
        assert got[t] == pytest.approx(ref.item(), abs=1e-5)


def test_a_sink_token_model_must_keep_its_slot():
    model = tiny("sink-token").hf
    for name in ("window", "h2o"):
        with pytest.raises(UsageError, match="sink token"):
            check_sink_slot(model, make_policy(name, 16, n_sink=0))
    check_sink_slot(model, make_policy("sinks", 16, n_sink=1))
    check_sink_slot(model, make_policy("full"))
    check_sink_slot(tiny("softmax").hf, make_policy("window", 16))  # no sink token: nothing to keep


def test_sinks_beyond_the_budget_are_refused():
    with pytest.raises(UsageError, match="no room"):
        make_policy("sinks", 4, n_sink=4)


# --------------------------------------------------------------------------- the sink metrics
def test_sink_rate_counts_heads_that_attend_to_position_k():
    t = 16  # a uniform row's mean weight on token 0 is H_16 / 16 = 0.21 < eps
    sink = torch.zeros(1, 1, t, t)
    sink[..., 0] = 1.0  # every query on token 0
    uniform = torch.ones(t, t).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True))[None, None]  # (1, 1, T, T)
    imp = sink_importance(uniform, 3)
    assert imp[0, 0] == pytest.approx(sum(1 / (i + 1) for i in range(t)) / t)
    assert imp[0, 2] == pytest.approx(sum(1 / (i + 1) for i in range(2, t)) / (t - 2))
    assert sink_rate([sink, uniform], eps=0.3, k_max=3) == [0.5, 0.0, 0.0]


def test_position_norm_ratio():
    h = torch.ones(2, 5, 4)
    assert position_norm_ratio(h).item() == pytest.approx(1.0)
    h[:, 0] *= 100
    assert position_norm_ratio(h).item() == pytest.approx(100.0)
    assert math.isfinite(position_norm_ratio(torch.randn(1, 3, 4)).item())
