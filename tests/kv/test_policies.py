"""The policy registry and knorm (Devoto et al. 2024): what a policy sees, and what knorm keeps."""
from dataclasses import dataclass

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.layer import PolicyLayer
from attnlab.kv.policies import POLICIES, KVPolicy, make_policy
from attnlab.kv.policy_classic import KNorm
from attnlab.models import arch
from attnlab.models.rotary import RopeSpec
from tiny_models import ROPE_ARCHS, V

T = 40


def _norms(keys: torch.Tensor) -> torch.Tensor:  # (B, H, S, D) -> (B, H, S)
    return torch.linalg.vector_norm(keys, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # a float64 model's keys are read as float64
def test_knorm_keeps_exactly_the_smallest_key_norms(dtype):
    """A layer of 12 stored keys, budget 5: the next step keeps the 5 keys of smallest L2 norm per batch row and
    KV head (each its own), then stores the new token."""
    g = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(2, 3, 12, 8, generator=g, dtype=dtype) for _ in range(2))
    layer = PolicyLayer(make_policy("knorm", budget=5))
    layer.update(keys, values)
    smallest = _norms(keys).argsort(-1)[..., :5].sort(-1).values  # (B, H, 5) stream indices
    layer.update(*(torch.randn(2, 3, 1, 8, generator=g, dtype=dtype) for _ in range(2)))
    kept = layer.pos.sort(-1).values
    assert torch.equal(kept[..., :5], smallest) and (kept[..., 5] == 12).all()
    assert not torch.equal(smallest[:, 0], smallest[:, 1])  # the heads did keep different tokens
    order = layer.pos.argsort(-1)  # the stored keys and values are those tokens' own
    assert torch.equal(layer.keys.gather(2, order[..., None].expand(-1, -1, -1, 8))[..., :5, :],
                       keys.gather(2, smallest[..., None].expand(-1, -1, -1, 8)))


@pytest.mark.parametrize("positions", ["original", "rolling"])
def test_knorm_streaming_evicts_the_largest_norm_and_holds_its_budget(tiny_models, positions):
    """Token by token through a tiny Llama: every eviction, in every layer, row and KV head, removes a key whose
    norm is the largest among the slots it chose from (no sink, no recent window protected), and the cache
    never holds more than budget + the new token."""
    model, budget = tiny_models["llama"], 8
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))
    cache = PolicyCache(model, make_policy("knorm", budget=budget), positions)
    evictions = 0
    with cache, torch.no_grad():
        model(tokens[:, :1], past_key_values=cache)
        for t in range(1, T):
            before = [(layer.pos.clone(), _norms(layer.keys)) for layer in cache.layers]
            model(tokens[:, t:t + 1], past_key_values=cache)
            for (pos0, norm0), layer in zip(before, cache.layers):
                assert layer.keys.shape[-2] <= budget + 1
                gone = ~(pos0[..., :, None] == layer.pos[..., None, :]).any(-1)  # (B, H, S0): evicted this step
                if gone.any():
                    evictions += int(gone.sum())
                    assert (gone.sum(-1) == 1).all()  # steady decoding: one slot per row and head
                    evicted_norm = norm0.masked_fill(~gone, 0).sum(-1, keepdim=True)
                    assert (norm0 <= evicted_norm + 1e-6).all()
    assert evictions == 2 * model.config.num_key_value_heads * 2 * (T - budget - 1)  # layers x rows x heads x steps


@pytest.mark.parametrize("arch_name", ROPE_ARCHS)
def test_rope_keeps_each_keys_l2_norm(tiny_models, arch_name):
    """RoPE rotates pairs of channels (partial rotary: some of them), so a key's L2 norm is the same at any
    position: knorm's post-RoPE norm is the pre-RoPE one."""
    spec = RopeSpec.of(tiny_models[arch_name])
    k = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    rotated = spec.rotate(k, torch.tensor([0, 1, 7, 100, 1000, 10_000]))
    assert not torch.allclose(rotated, k)
    torch.testing.assert_close(_norms(rotated), _norms(k), atol=1e-5, rtol=1e-5)


def test_stored_key_norms_equal_the_pre_rope_key_norms(tiny_models):
    """Through a real evicting cache with rolling positions (kept keys re-rotated), layer 0's stored keys have the
    norms of the projections before RoPE (layer-0 keys depend on the token alone)."""
    model = tiny_models["llama"]
    tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(2))
    k_proj = arch.attention(model, 0).module.k_proj
    pre = []  # per step (B, 1, H*D)
    handle = k_proj.register_forward_hook(lambda m, i, out: pre.append(out.detach()))
    cache = PolicyCache(model, make_policy("knorm", budget=10), "rolling")
    try:
        with cache, torch.no_grad():
            for t in range(T):
                model(tokens[:, t:t + 1], past_key_values=cache)
    finally:
        handle.remove()
    layer = cache.layers[0]
    b, h, _, d = layer.keys.shape
    pre_norms = _norms(torch.cat(pre, 1).view(b, T, h, d).transpose(1, 2))  # (B, H, T)
    torch.testing.assert_close(_norms(layer.keys), pre_norms.gather(-1, layer.pos), atol=1e-5, rtol=1e-5)
    assert (layer.pos.amax(-1) == T - 1).all() and (layer.pos.amin(-1) < T - 11).any()  # it did evict by norm


def test_the_registry_is_what_names_policies():
    """Every registered name builds, its class is the registry's, and the command and configs take it."""
    from attnlab.kv.configs import StreamRun
    from attnlab.kv.experiments import H2OConfig
    from attnlab.recall.experiments import StreamEvalConfig

    assert "knorm" in POLICIES and POLICIES.get("knorm") is KNorm
    for name in POLICIES.names():
        assert type(make_policy(name, 16, n_sink=2, recent=4)) is POLICIES.get(name)
        assert StreamRun(methods=(f"{name}:budget=16",)).make_policy().name == name
    assert H2OConfig(policies=("sinks", "sinks+h2o", "knorm")).policy("knorm") == KNorm(256)
    assert StreamEvalConfig(policies=("knorm", "window")).policies == ("knorm", "window")
    with pytest.raises(UsageError, match="did you mean 'knorm'"):
        StreamRun(methods=("knorn:budget=16",))
    for config in (H2OConfig, StreamEvalConfig):
        with pytest.raises(UsageError, match=r"policies \['knorn'\]: use some of .*knorm"):
            config(policies=("sinks", "sinks+h2o", "knorn"))


def test_stream_help_lists_every_registered_policy(capsys):
    from attnlab.cli import main

    with pytest.raises(SystemExit):
        main(["stream", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "KV-cache policy: " + ", ".join(POLICIES.names()) in text


def test_a_policy_brings_its_own_options():
    """A policy's options are its fields: ``from_options`` takes those it has and ignores the shared ones it
    lacks; make_policy refuses an option the policy does not take, in one line."""

    @dataclass(frozen=True)
    class Tempered(KVPolicy):
        tau: float = 1.0
        n_sink: int = 4
        name = "tempered"

    assert Tempered.options() == ("tau", "n_sink")
    assert Tempered.from_options(8, n_sink=2, recent=3, tau=0.5) == Tempered(8, tau=0.5, n_sink=2)
    assert KNorm.options() == () and make_policy("knorm", 8, n_sink=2, recent=3) == KNorm(8)
    with pytest.raises(UsageError, match=r"^policy 'knorm' takes no option 'tau' \(it takes none\)$"):
        make_policy("knorm", 8, tau=0.5)
    with pytest.raises(UsageError, match=r"takes no option 'tau' \(its options: n_sink\)$"):
        make_policy("sinks", 8, tau=0.5)
