"""The architecture table on tiny random models: every path resolves to a module of the right shape."""
import dataclasses

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from attnlab.core.errors import UsageError
from attnlab.models import arch
from tiny_models import ARCHS, tiny

ROTARY_DIMS = {"llama": 8, "gpt_neox": 4, "gpt2": 0, "opt": 0}  # head_dim 8; NeoX rotates half of it
POSITION = {"llama": arch.ROPE, "gpt_neox": arch.PARTIAL_ROPE, "gpt2": arch.LEARNED, "opt": arch.LEARNED}


def _llama_like(config_cls, model_cls):
    torch.manual_seed(0)
    return model_cls(config_cls(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2)).eval()


@pytest.fixture(scope="module")
def models(tiny_models):
    return {**tiny_models, "mistral": _llama_like(MistralConfig, MistralForCausalLM),
            "qwen2": _llama_like(Qwen2Config, Qwen2ForCausalLM)}


def _out_in(proj):
    return tuple(arch.weight(proj).shape)


@pytest.mark.parametrize("name", [*ARCHS, "mistral", "qwen2"])
def test_every_path_resolves_to_a_module_of_the_right_shape(models, name):
    model = models[name]
    a, d = arch.arch_of(model), arch.dims(model)
    assert a.family == model.config.model_type
    assert d == (2, 32, 4, 2 if name in ("llama", "mistral", "qwen2") else 4, 8, d.d_ff, 64)
    assert d.d_ff == (128 if name == "gpt2" else 64)
    assert len(arch.layers(model)) == 2
    for i in range(2):
        att = arch.attention(model, i)
        assert att.module.layer_idx == i
        if a.qkv is None:
            assert _out_in(att.q) == (d.n_heads * d.head_dim, 32)
            assert _out_in(att.k) == _out_in(att.v) == (d.n_kv_heads * d.head_dim, 32)
        else:
            assert att.q is att.k is att.v is None and _out_in(att.qkv) == (3 * 32, 32)
        assert _out_in(att.o) == (32, d.n_heads * d.head_dim)
        m = arch.mlp(model, i)
        assert _out_in(m.in_proj) == (d.d_ff, 32) and _out_in(m.out_proj) == (32, d.d_ff)
        assert (m.gate_proj is not None) == (m.act == arch.GATED_SILU)
        if m.gate_proj is not None:
            assert _out_in(m.gate_proj) == (d.d_ff, 32)
        assert callable(m.act_fn) and isinstance(m.module, torch.nn.Module)
        for norm in arch.norms(model, i):
            assert tuple(norm.weight.shape) == (32,)
    assert tuple(arch.final_norm(model).weight.shape) == (32,)
    emb = arch.embeddings(model)
    assert tuple(emb.tokens.weight.shape) == (64, 32) and tuple(arch.lm_head(model).weight.shape) == (64, 32)
    assert (emb.positions is None) == (a.position == arch.ROPE)


@pytest.mark.parametrize("name", ARCHS)
def test_rotary_modules_and_position_kind(models, name):
    model = models[name]
    rot = arch.rotary_modules(model)
    assert [2 * m.inv_freq.numel() for m in rot] == ([ROTARY_DIMS[name]] if ROTARY_DIMS[name] else [])
    assert arch.position_kind(model) == POSITION[name]
    assert arch.position_kind(tiny("gpt_neox", rotary_pct=1.0)) == arch.ROPE


def test_the_mlp_is_what_the_table_says(models):
    """Recompose each MLP from its parts: in/gate/out and the activation kind."""
    x = torch.randn(1, 5, 32)
    for name in ARCHS:
        m = arch.mlp(models[name], 0)
        hidden = m.act_fn(m.gate_proj(x)) * m.in_proj(x) if m.act == arch.GATED_SILU else m.act_fn(m.in_proj(x))
        ref = m.module(x) if name != "opt" else m.out_proj(m.act_fn(m.in_proj(x)))
        torch.testing.assert_close(m.out_proj(hidden), ref)


def test_every_row_names_complete_paths():
    for row in arch.ARCHS.values():
        for f in dataclasses.fields(row):
            value = getattr(row, f.name)
            assert value is None or isinstance(value, (str, bool)), (row.family, f.name)
        assert row.position in (arch.ROPE, arch.LEARNED) and (row.rotary is None) == (row.position == arch.LEARNED)
        assert (row.act in (arch.GATED_SILU, arch.GELU, arch.RELU)
                and (row.mlp_gate is None) != (row.act == arch.GATED_SILU))


def test_unknown_family_and_bad_index_are_one_clear_error(models):
    from transformers import BloomConfig, BloomForCausalLM

    bloom = BloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=4))
    with pytest.raises(UsageError, match=r"model_type 'bloom'.*supported families are llama, mistral") as e:
        arch.layers(bloom)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match=r"layer index 2 is out of range: this model has 2 layers"):
        arch.attention(models["llama"], 2)
    with pytest.raises(UsageError, match="out of range"):
        arch.mlp(models["opt"], -1)


def test_a_gated_mlp_reports_the_activation_its_config_names():
    assert arch.mlp(tiny("llama"), 0).act == arch.GATED_SILU
    assert arch.mlp(tiny("llama", hidden_act="relu"), 0).act == arch.GATED_RELU
    assert arch.mlp(tiny("gpt2"), 0).act == arch.GELU  # not gated: the row's kind
