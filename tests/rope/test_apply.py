"""RoPE scalings: identity at factor 1, agreement with transformers' initialisers, context restore,
config export round trip, composition with the KV policies (tiny random models, no network)."""
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.models.rotary import RopeSpec
from attnlab.rope.apply import ScaledRope, export_scaling
from attnlab.rope.scalings import SCALINGS, make_scaling, rope_inv_freq
from tiny_models import V, tiny

L0 = 32  # trained context of the tiny models: sequences of 80 tokens are 2.5x past it


def _llama(**rope):
    return tiny("llama", max_position_embeddings=L0, rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                                                      **rope})


def _neox():
    return tiny("gpt_neox", max_position_embeddings=L0)


@pytest.fixture(scope="module")
def x():
    return torch.randint(0, V, (2, 80), generator=torch.Generator().manual_seed(3))


def _logits(model, x):
    with torch.no_grad():
        return model(x).logits


@pytest.mark.parametrize("name", SCALINGS)
def test_factor_one_is_exactly_the_original_rope(name, x):
    s = make_scaling(name, 1.0)
    for seq_len in (None, L0, 4 * L0 if name != "dynamic-ntk" else L0):
        inv, att = s.frequencies(10000.0, 16, L0, seq_len)
        assert torch.equal(inv, rope_inv_freq(10000.0, 16)) and att == 1.0
    model = _llama()
    plain = _logits(model, x[:, :L0])
    with ScaledRope(model, s):
        assert torch.equal(_logits(model, x[:, :L0]), plain)


def _hf_config(rope):
    return LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=L0,
                       rope_parameters={"rope_theta": 500.0, **rope})


@pytest.mark.parametrize("name, rope, seq_len", [
    ("pi", {"rope_type": "linear", "factor": 4.0}, None),
    ("dynamic-ntk", {"rope_type": "dynamic", "factor": 4.0}, None),
    ("dynamic-ntk", {"rope_type": "dynamic", "factor": 4.0}, 3 * L0),
    ("dynamic-ntk", {"rope_type": "dynamic", "factor": 1.0}, 5 * L0),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}, None),
    ("yarn", {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": L0,
              "beta_fast": 8.0, "beta_slow": 2.0}, None),
])
def test_frequencies_agree_with_transformers_initialisers(name, rope, seq_len):
    extra = {k: rope[k] for k in ("beta_fast", "beta_slow") if k in rope}
    ours_inv, ours_att = SCALINGS.get(name)(factor=rope["factor"], **extra).frequencies(500.0, 16, L0, seq_len)
    theirs_inv, theirs_att = ROPE_INIT_FUNCTIONS[rope["rope_type"]](_hf_config(rope), "cpu", seq_len=seq_len)
    torch.testing.assert_close(ours_inv, theirs_inv.float(), atol=0, rtol=1e-6)
    assert ours_att == pytest.approx(theirs_att, rel=1e-12)


def test_ntk_is_the_default_rope_at_the_scaled_base():
    s = make_scaling("ntk", 4.0)
    inv, _ = s.frequencies(500.0, 16, L0)
    cfg = _hf_config({"rope_type": "default", "rope_theta": 500.0 * 4.0 ** (16 / 14)})
    ref, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    torch.testing.assert_close(inv, ref, atol=0, rtol=1e-6)
    # the highest frequency is kept (extrapolated), the lowest divided by about s (interpolated)
    base = rope_inv_freq(500.0, 16)
    assert inv[0] == base[0] and inv[-1] / base[-1] == pytest.approx(1 / 4.0, rel=0.25)


@pytest.mark.parametrize("name", ["pi", "ntk", "dynamic-ntk", "yarn"])
def test_scaling_applies_inside_and_restores_on_exit(name, x):
    model = _llama()
    rot = model.model.rotary_emb
    plain, inv0, att0 = _logits(model, x), rot.inv_freq.clone(), rot.attention_scaling
    with ScaledRope(model, make_scaling(name, 4.0)) as sr:
        scaled = _logits(model, x)
        expected, _ = sr.frequencies(x.shape[1])
        torch.testing.assert_close(rot.inv_freq, expected, atol=0, rtol=0)
    assert not torch.allclose(scaled, plain)
    assert torch.equal(rot.inv_freq, inv0) and rot.attention_scaling == att0
    assert torch.equal(_logits(model, x), plain)


@pytest.mark.parametrize("name", ["pi", "ntk", "dynamic-ntk", "yarn"])
@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_exported_scaling_saves_and_reloads(name, arch, x, tmp_path):
    """A model saved with the exported config computes, after from_pretrained, what it computed
    inside ScaledRope (partial rotary included)."""
    model = _llama() if arch == "llama" else _neox()
    scaling = make_scaling(name, 4.0)
    with ScaledRope(model, scaling):
        inside = _logits(model, x)
    export_scaling(model.config, scaling)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(_logits(reloaded, x), inside, atol=1e-5, rtol=1e-5)


def test_models_without_rope_are_refused():
    gpt2 = tiny("gpt2", None, n_layer=1, n_positions=64)
    with pytest.raises(UsageError, match="no rotary position embedding"):
        ScaledRope(gpt2, make_scaling("ntk", 2.0))


def test_already_scaled_models_are_refused():
    with pytest.raises(UsageError, match="already uses RoPE type 'linear'"):
        ScaledRope(_llama(rope_type="linear", factor=2.0), make_scaling("ntk", 2.0))


@pytest.mark.parametrize("name, factor, message", [
    ("ntk", 0.5, "s >= 1"), ("yarm", 2.0, "did you mean 'yarn'"), ("pi", float("nan"), "s >= 1")])
def test_bad_scalings_are_one_clear_error(name, factor, message):
    with pytest.raises(UsageError, match=message):
        make_scaling(name, factor)


# -- composition with the KV policies ------------------------------------------------------------
def test_ntk_with_sinks_composes(x):
    """Scaling outside, cache inside: (1) a budget covering the stream equals the scaled forward;
    (2) rolling re-rotation uses the scaled frequencies; (3) dynamic NTK refuses rolling."""
    model = _llama()
    with ScaledRope(model, make_scaling("ntk", 4.0)) as sr:
        dense = _logits(model, x)
        cache = PolicyCache(model, make_policy("sinks", budget=x.shape[1] + 1, n_sink=2), "rolling")
        torch.testing.assert_close(RopeSpec.of(model).inv_freq, sr.frequencies()[0], atol=0, rtol=0)
        with cache, torch.no_grad():
            streamed = torch.cat([model(x[:, t:t + 1], past_key_values=cache).logits for t in range(x.shape[1])], 1)
        torch.testing.assert_close(streamed, dense, atol=1e-4, rtol=1e-4)
    with ScaledRope(model, make_scaling("dynamic-ntk", 2.0)):
        with pytest.raises(UsageError, match="dynamic NTK"):
            PolicyCache(model, make_policy("sinks", budget=8), "rolling")


def test_rolling_keys_under_ntk_sit_at_their_rank(x):
    """With eviction and rolling positions under NTK, layer-0 keys equal fresh keys of the kept
    tokens computed at their rank positions with the same scaling."""
    model = _llama()
    with ScaledRope(model, make_scaling("ntk", 4.0)):
        cache = PolicyCache(model, make_policy("sinks", budget=12, n_sink=2), "rolling")
        with cache, torch.no_grad():
            for t in range(50):
                model(x[:1, t:t + 1], past_key_values=cache)
        layer = cache.layers[0]
        order = layer.pos.argsort(-1)
        pos, keys = layer.pos.gather(-1, order), layer.keys.gather(2, order[..., None].expand_as(layer.keys))
        s = pos.shape[-1]
        for h in range(pos.shape[1]):
            fresh = PolicyCache(model, make_policy("full"), "original")
            with fresh, torch.no_grad():
                model(x[:1, pos[0, h]], position_ids=(torch.arange(s) + layer.seen - s)[None], past_key_values=fresh)
            torch.testing.assert_close(keys[0, h], fresh.layers[0].keys[0, h], atol=1e-5, rtol=1e-4)


def test_beyond_trained_counts_the_pairs_a_scaling_leaves_past_their_angles():
    """At L' = s·L: no scaling takes every never-turning pair s times past its largest trained angle, PI none
    (exactly 1), NTK-aware all but its lowest (which it divides by s, as PI does) -- and YaRN none at s = 4."""
    import math

    from attnlab.rope.scalings import beyond_trained

    base, dim, L, s = 10000.0, 32, 64, 4.0
    never = int((L * rope_inv_freq(base, dim) < 2 * math.pi).sum())
    none, pi, ntk, yarn = (beyond_trained(make_scaling(n, s), base, dim, L, int(s * L))
                           for n in ("none", "pi", "ntk", "yarn"))
    assert len(none) == len(pi) == len(ntk) == never > 0
    torch.testing.assert_close(none, torch.full((never,), s))
    torch.testing.assert_close(pi, torch.ones(never))
    assert ntk[-1] == pytest.approx(1.0, rel=1e-5) and bool((ntk[:-1] > 1.0).all())
    assert bool((yarn <= 1 + 1e-6).all())
