"""Named activations on tiny random models: shapes, values recomputed by hand, hooks removed on exit."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.models.trace import HOOK_POINTS, Trace, hook_names
from tiny_models import ARCHS

B, T = 2, 5


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 64, (B, T), generator=torch.Generator().manual_seed(0))


def _hooks(model) -> frozenset:
    """Every forward (pre-)hook on the model, by module and id. (transformers itself leaves output-capturing
    hooks behind after a call with output_attentions=True, so a shared model need not start with none.)"""
    return frozenset((name, kind, key) for name, m in model.named_modules()
                     for kind in ("_forward_hooks", "_forward_pre_hooks") for key in getattr(m, kind))


@pytest.mark.parametrize("name", ARCHS)
def test_every_hook_point_has_its_documented_shape(tiny_models, name, ids):
    model = tiny_models[name]
    before = _hooks(model)
    d = arch.dims(model)
    sizes = {"B": B, "T": T, "S": T, "d": d.d_model, "H": d.n_heads, "d_h": d.head_dim, "d_ff": d.d_ff}
    with Trace(model, "*") as tr, torch.no_grad():
        model(ids)
    assert sorted(tr.acts) == sorted(hook_names(model)) and len(tr.acts) == 2 + 10 * d.n_layers
    for hook, t in tr.acts.items():
        template = "blocks.{i}." + hook.split(".", 2)[2] if hook.startswith("blocks.") else hook
        expected = tuple(sizes[s.strip()] for s in HOOK_POINTS[template].shape.strip("()").split(","))
        assert tuple(t.shape) == expected, hook
        assert not t.requires_grad
    # the residual stream joins up: what leaves layer i enters layer i + 1
    torch.testing.assert_close(tr["blocks.0.resid_post"], tr["blocks.1.resid_pre"], atol=0, rtol=0)
    assert _hooks(model) == before and model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("name", ARCHS)
def test_tracing_leaves_the_logits_and_the_model_as_they_were(tiny_models, name, ids):
    model = tiny_models[name]
    before = _hooks(model)
    with torch.no_grad():
        plain = model(ids).logits
        with Trace(model, ["blocks.*.mlp.post", "blocks.1.attn.z", "final_norm"]) as tr:
            traced = model(ids).logits
        assert torch.equal(traced, plain)
        assert _hooks(model) == before
        with Trace(model, "blocks.*.attn.pattern") as tr2:
            assert model.config._attn_implementation == "eager"
            eager = model(ids).logits
        torch.testing.assert_close(eager, plain, atol=1e-5, rtol=1e-5)  # eager vs SDPA: rounding only
        assert model.config._attn_implementation == "sdpa" and _hooks(model) == before
        assert torch.equal(model(ids).logits, plain)
        for p in tr2.acts.values():  # rows are causal probability distributions
            torch.testing.assert_close(p.sum(-1), torch.ones(B, p.shape[1], T))
            assert p.triu(1).abs().max() == 0
    # the LM head applied to final_norm gives the logits
    torch.testing.assert_close(arch.lm_head(model)(tr["final_norm"]), plain, atol=1e-5, rtol=1e-5)


def test_llama_activations_recomputed_by_hand(tiny_models, ids):
    """Layer 0 of the tiny Llama: RMSNorm, q/k projections, RoPE, shared KV heads, causal softmax;
    then z through o_proj, and the SwiGLU MLP from its input."""
    model = tiny_models["llama"]
    with Trace(model, ["blocks.0.*", "embed"]) as tr, torch.no_grad():
        model(ids)
    block, dh = model.model.layers[0], 8
    with torch.no_grad():
        h = block.input_layernorm(tr["embed"])  # (B, T, d)
        q = block.self_attn.q_proj(h).view(B, T, 4, dh).transpose(1, 2)  # (B, 4, T, dh)
        k = block.self_attn.k_proj(h).view(B, T, 2, dh).transpose(1, 2)  # (B, 2, T, dh)
        inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2).float() / dh))
        ang = torch.arange(T).float()[:, None] * inv  # (T, dh/2)
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

        def rope(t):  # rotate_half convention: pairs (i, i + dh/2)
            t1, t2 = t[..., : dh // 2], t[..., dh // 2:]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        s = rope(q) @ rope(k).repeat_interleave(2, dim=1).transpose(-1, -2) / dh**0.5  # query heads 0,1 share KV 0
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(tr["blocks.0.attn.pattern"], s.softmax(-1), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(tr["blocks.0.attn.in"], h)
        torch.testing.assert_close(block.self_attn.o_proj(tr["blocks.0.attn.z"].flatten(2)), tr["blocks.0.attn.out"])
        mlp = block.mlp
        x = tr["blocks.0.mlp.in"]
        torch.testing.assert_close(x, block.post_attention_layernorm(tr["blocks.0.resid_pre"]
                                                                     + tr["blocks.0.attn.out"]))
        torch.testing.assert_close(tr["blocks.0.mlp.pre"], mlp.up_proj(x))
        torch.testing.assert_close(tr["blocks.0.mlp.post"], mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        torch.testing.assert_close(tr["blocks.0.mlp.out"], mlp(x))
        torch.testing.assert_close(tr["blocks.0.resid_post"],
                                   tr["blocks.0.resid_pre"] + tr["blocks.0.attn.out"] + tr["blocks.0.mlp.out"])


def test_opt_mlp_points_are_unflattened(tiny_models, ids):
    model = tiny_models["opt"]
    with Trace(model, "blocks.1.mlp.*") as tr, torch.no_grad():
        model(ids)
    layer = model.model.decoder.layers[1]
    torch.testing.assert_close(tr["blocks.1.mlp.post"], layer.activation_fn(tr["blocks.1.mlp.pre"]))
    torch.testing.assert_close(tr["blocks.1.mlp.out"], layer.fc2(tr["blocks.1.mlp.post"]))


@pytest.mark.parametrize("names, message", [
    ("blocks.0.attn.patern", r"unknown hook point 'blocks.0.attn.patern': did you mean 'blocks.0.attn.pattern'\?"),
    ("blocks.*.mlp.psot", "did you mean"),
    ("emb", "did you mean 'embed'"),
    (["embed", "blocks.2.mlp.in"], r"layer index 2 is out of range \(this model has 2 layers"),
])
def test_bad_names_are_one_clear_error(tiny_models, names, message):
    model = tiny_models["llama"]
    before = _hooks(model)
    with pytest.raises(UsageError, match=message) as e:
        Trace(model, names)
    assert "\n" not in str(e.value) and _hooks(model) == before


def test_a_pattern_inside_the_evicting_cache_is_refused(tiny_models):
    from attnlab.kv.cache import PolicyCache
    from attnlab.kv.policies import make_policy

    model = tiny_models["llama"]
    before = _hooks(model)
    with PolicyCache(model, make_policy("full")):
        with pytest.raises(UsageError, match="outside the PolicyCache"):
            with Trace(model, "blocks.0.attn.pattern"):
                pass
        assert model.config._attn_implementation == "attnlab_kv" and _hooks(model) == before
