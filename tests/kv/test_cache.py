"""The evicting KV cache on tiny random models of four architectures (no network, no GPU)."""
import io
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.models.rotary import RopeSpec
from tiny_models import ARCHS, V
from tiny_models import ROPE_ARCHS as ROPE

T = 40
EVICTING = [n for n in POLICIES.names() if POLICIES.get(n).needs_budget]  # every registered policy that evicts
# the policies whose heads share a layer's budget (Ada-KV): heads keep different counts, the rest stored masked;
# rolling positions are refused for them (tested below), so they stream at original positions
SHARED = {n for n in EVICTING if make_policy(n, 8).shares_budget()}


def _positions(policy: str, wanted: str) -> str:
    return "original" if policy in SHARED else wanted


def _policy(name, budget):
    return make_policy(name, budget=None if name == "full" else budget, n_sink=2)


def _stream(model, cache, x, record=False):
    """Token by token through the cache: logits (B, T, V) and, if asked, the slots each step attended."""
    logits, seen = [], []
    with cache, torch.no_grad():
        for t in range(x.shape[1]):
            logits.append(model(x[:, t:t + 1], past_key_values=cache).logits)
            if record:  # the slots each query could attend: a masked slot (a shared budget's) as -1
                seen.append([layer.pos.masked_fill(~layer.valid, -1) for layer in cache.layers])
    return torch.cat(logits, 1), seen


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("positions", ["original", "rolling"])
@pytest.mark.parametrize("policy", POLICIES.names())
def test_budget_covering_the_stream_equals_a_plain_forward(tiny_models, arch, positions, policy, tokens):
    model = tiny_models[arch]
    if positions == "rolling" and (arch not in ROPE or policy in SHARED):
        pytest.skip("learned positions, or heads that share a budget: rolling is refused (tested below)")
    with torch.no_grad():
        ref = model(tokens).logits
    budget = (T + 5) * (20 if policy == "pyramidkv" else 1)  # a pyramid's top layer keeps budget/beta (beta 20)
    cache = PolicyCache(model, _policy(policy, budget), positions)
    out, _ = _stream(model, cache, tokens)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _masked_attention(masks):
    """An attention function for a dense forward that hides, per layer, KV head and query, the
    tokens the cache had evicted: masks[layer] (B, Hkv, T, T) bool."""

    def fn(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        g = query.shape[1] // key.shape[1]
        m = masks[module.layer_idx].repeat_interleave(g, dim=1)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=m, scale=scaling, enable_gqa=g > 1)
        return out.transpose(1, 2).contiguous(), None

    return fn


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("policy", EVICTING)
@pytest.mark.parametrize("budget", [9, 0.3])  # 0.3: a budget that grows, so appends and in-place evictions mix
def test_eviction_equals_masking_the_evicted_tokens_in_a_dense_forward(tiny_models, arch, policy, budget, tokens):
    model = tiny_models[arch]
    cache = PolicyCache(model, _policy(policy, budget), "original")
    out, seen = _stream(model, cache, tokens, record=True)
    b, n_layers = tokens.shape[0], len(seen[0])
    hkv = seen[0][0].shape[1]
    masks = [torch.zeros(b, hkv, T, T, dtype=torch.bool) for _ in range(n_layers)]
    for t, per_layer in enumerate(seen):
        for layer, pos in enumerate(per_layer):  # pos (B, Hkv, S): stream indices query t attended to (-1: masked)
            row = torch.zeros(b, hkv, T + 1, dtype=torch.bool).scatter_(-1, pos.where(pos >= 0, T), True)
            masks[layer][:, :, t] = row[..., :T]
            cap = cache.layers[layer].policy.capacity(T) + 1  # the layer's budget + the new token
            assert ((pos >= 0).sum((-1, -2)) <= cap * hkv).all() and (policy in SHARED or pos.shape[-1] <= cap)
            assert pos.unique(dim=-1).shape[-1] == pos.shape[-1]  # no stream index stored twice
    AttentionInterface.register("test_masked", _masked_attention(masks))
    AttentionMaskInterface.register("test_masked", sdpa_mask)
    saved = model.config._attn_implementation
    model.set_attn_implementation("test_masked")
    try:
        with torch.no_grad():
            ref = model(tokens).logits
    finally:
        model.set_attn_implementation(saved)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert (out - model(tokens).logits).abs().max() > 1e-3  # eviction did change the output


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_h2o_scores_are_attention_column_sums(tiny_models, arch, tokens):
    model = tiny_models[arch]
    cache = PolicyCache(model, make_policy("h2o", budget=T + 1), "original")
    _stream(model, cache, tokens)
    saved = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(tokens, output_attentions=True).attentions  # per layer (B, Hq, T, T)
    finally:
        model.set_attn_implementation(saved)
    for layer, a in zip(cache.layers, att):
        hkv = layer.score.shape[1]
        expected = a.sum(2).view(a.shape[0], hkv, -1, T).sum(2)  # over queries and the group's heads
        torch.testing.assert_close(layer.score, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["original", "rolling"])
@pytest.mark.parametrize("name", EVICTING)
def test_kept_sets_hold_the_sinks_and_the_recent_window(tiny_models, positions, name, tokens):
    model = tiny_models["llama"]
    policy = make_policy(name, budget=12, n_sink=2, recent=4)  # each reads the options it has
    cache = PolicyCache(model, policy, _positions(name, positions))
    _stream(model, cache, tokens)
    for i in range(len(cache.layers)):
        own = cache.layers[i].policy  # the layer's share of the policy (a pyramid's budget differs by layer)
        n_sink, recent = getattr(own, "n_sink", 0), own.n_recent(own.capacity(T))
        layer = cache.layers[i]
        kept = layer.pos.masked_fill(~layer.valid, -1)  # (B, H, S): a masked slot (a shared budget's) as -1
        visible = (kept >= 0).sum((-1, -2))  # (B,): every head's visible slots
        assert (visible == (own.capacity(T) + 1) * kept.shape[1]).all()
        assert name in SHARED or kept.shape[-1] == own.capacity(T) + 1
        for must in [*range(n_sink), *range(T - recent, T)]:
            assert (kept == must).any(-1).all(), (name, must)
        assert kept.unique(dim=-1).shape[-1] == kept.shape[-1]  # no slot stored twice


def test_h2o_evicts_the_lowest_accumulated_score_outside_the_recent_window(tiny_models, tokens):
    model, recent = tiny_models["llama"], 4
    cache = PolicyCache(model, make_policy("h2o", budget=10, recent=recent), "original")
    states = []
    with cache, torch.no_grad():
        for t in range(T):
            model(tokens[:, t:t + 1], past_key_values=cache)
            states.append([(l.pos.clone(), l.score.clone()) for l in cache.layers])
    evictions = 0
    for t in range(1, T):
        for (pos0, score0), (pos1, _) in zip(states[t - 1], states[t]):
            for b in range(pos0.shape[0]):
                for h in range(pos0.shape[1]):
                    gone = set(pos0[b, h].tolist()) - set(pos1[b, h].tolist())
                    if not gone:
                        continue
                    evictions += 1
                    (e,) = gone
                    old = pos0[b, h] < t - recent  # not in the recent window when the eviction ran
                    assert e < t - recent
                    e_score = score0[b, h][pos0[b, h] == e]
                    assert (score0[b, h][old] >= e_score).all()
    assert evictions > 0


@pytest.mark.parametrize("arch", ROPE)
@pytest.mark.parametrize("lag_limit", [0, 3])
def test_rolling_keys_sit_at_their_rank_in_the_cache(tiny_models, arch, lag_limit, tokens):
    """Layer-0 keys depend only on token and position, so the stored (re-rotated) keys must equal
    fresh keys computed at rank + (query position - cache size), the relative placement rolling means:
    rotated at each eviction (lag_limit 0), or owed and paid by ``settle``."""
    model = tiny_models[arch]
    cache = PolicyCache(model, make_policy("sinks+h2o", budget=10, n_sink=2, recent=3), "rolling", lag_limit=lag_limit)
    _stream(model, cache, tokens)
    layer = cache.layers[0]
    assert (layer.rolling.turns > 0) == (lag_limit > 0)  # the stream ends owing rotations, or owing none
    layer.settle()
    with torch.no_grad():
        order = layer.pos.argsort(-1)
        pos = layer.pos.gather(-1, order)  # (B, H, S) kept stream indices, in order
        keys = layer.keys.gather(2, order[..., None].expand_as(layer.keys))
        s = pos.shape[-1]
        offset = layer.seen - s
        for b in range(tokens.shape[0]):
            for h in range(pos.shape[1]):
                toks = tokens[b, pos[b, h]][None]
                rank_pos = (torch.arange(s) + offset)[None]
                ref = _layer0_keys(model, toks, rank_pos)[0, h]  # (S, D)
                torch.testing.assert_close(keys[b, h], ref, atol=1e-5, rtol=1e-4)


def test_sinks_re_rotate_only_their_sinks_and_count_them(tiny_models, tokens):
    """Rolling sinks evict the oldest token past the sinks each step, so each step re-rotates exactly the sinks,
    in every layer, batch row and KV head; the layer counts them (what the KV-decode benchmark reports)."""
    model = tiny_models["llama"]  # 2 layers, 2 KV heads
    cache = PolicyCache(model, make_policy("sinks", budget=6, n_sink=2), "rolling")
    _stream(model, cache, tokens)
    for layer in cache.layers:
        b, h, stored, _ = layer.keys.shape
        evicted = layer.seen - stored  # one token a step, each re-rotating the 2 sinks older than it
        assert evicted > 0 and layer.rerotated == evicted * b * h * 2


def _layer0_keys(model, toks, positions):
    """Keys of layer 0 for tokens (1, S) placed at the given positions: through a full cache."""
    cache = PolicyCache(model, make_policy("full"), "original")
    with cache:
        model(toks, position_ids=positions, past_key_values=cache)
    return cache.layers[0].keys


def test_batch_rows_are_independent_under_eviction(tiny_models, tokens):
    model = tiny_models["llama"]
    both, _ = _stream(model, PolicyCache(model, make_policy("sinks+h2o", budget=10, n_sink=2), "rolling"), tokens)
    for b in range(2):
        one, _ = _stream(model, PolicyCache(model, make_policy("sinks+h2o", budget=10, n_sink=2), "rolling"),
                         tokens[b:b + 1])
        torch.testing.assert_close(both[b:b + 1], one, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("policy", POLICIES.names())
def test_generate_runs_every_policy_and_memory_stays_bounded(tiny_models, arch, policy, tokens):
    model = tiny_models[arch]
    positions = _positions(policy, "rolling" if arch in ROPE else "original")
    prompt = tokens[:, :6].clone()
    mask = torch.ones_like(prompt)
    prompt[1, :2], mask[1, :2] = 0, 0  # left padding in row 1
    with PolicyCache(model, _policy(policy, 8), positions) as cache, torch.no_grad():
        out = model.generate(prompt, attention_mask=mask, past_key_values=cache, max_new_tokens=15, min_new_tokens=15,
                             do_sample=False, pad_token_id=0)
    assert out.shape == (2, 21)
    if policy in SHARED:  # heads keep different counts: 9 a head on average, the rest stored masked
        assert (cache.layers[0].valid.sum((-1, -2)) <= 9 * cache.layers[0].valid.shape[1]).all()
    else:
        assert cache.stored() == (20 if policy == "full" else 9)
    assert model.config._attn_implementation != "attnlab_kv"  # restored on exit


def test_generate_with_padding_equals_the_dynamic_cache_when_nothing_is_evicted(tiny_models, tokens):
    model = tiny_models["llama"]
    prompt, mask = tokens[:, :8].clone(), torch.ones(2, 8, dtype=torch.long)
    prompt[1, :3], mask[1, :3] = 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0,
              output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        ref = model.generate(prompt, **kw)
        with PolicyCache(model, make_policy("sinks+h2o", budget=30, n_sink=2), "rolling") as cache:
            out = model.generate(prompt, past_key_values=cache, **kw)
    assert torch.equal(out.sequences, ref.sequences)
    torch.testing.assert_close(torch.stack(out.scores), torch.stack(ref.scores), atol=1e-4, rtol=1e-4)


def test_evicted_memory_is_really_freed(tiny_models, tokens):
    model = tiny_models["llama"]
    dense = PolicyCache(model, make_policy("full"))
    small = PolicyCache(model, make_policy("sinks", budget=8, n_sink=2))
    _stream(model, dense, tokens)
    _stream(model, small, tokens)
    per_token = dense.kv_bytes() / T
    assert small.kv_bytes() == per_token * 9  # budget + the last step's token
    assert small.layers[0].keys.untyped_storage().nbytes() <= per_token * (T // 2) / len(small.layers)


def test_rolling_is_refused_where_heads_share_a_budget(tiny_models):
    for name in SHARED:
        with pytest.raises(UsageError, match="positions original"):
            PolicyCache(tiny_models["llama"], make_policy(name, budget=8), "rolling")
    assert SHARED  # Ada-KV at least


@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_rolling_is_refused_for_learned_positions(tiny_models, arch):
    with pytest.raises(UsageError, match="learned absolute positions"):
        PolicyCache(tiny_models[arch], make_policy("sinks", budget=8), "rolling")


def test_rope_rotation_composes(tiny_models):
    spec = RopeSpec.of(tiny_models["gpt_neox"])
    k = torch.randn(5, 8)
    a, b = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([7, 0, -3, 2, 1])
    torch.testing.assert_close(spec.rotate(spec.rotate(k, a), b), spec.rotate(k, a + b), atol=1e-5, rtol=1e-5)
    assert torch.equal(spec.rotate(k, a)[:, spec.rot_dims:], k[:, spec.rot_dims:])  # partial rotary: rest untouched
    # the int shortcut (cached cos/sin, steady decoding) is the same rotation
    torch.testing.assert_close(spec.rotate(k, 1), spec.rotate(k, torch.ones(5, dtype=torch.long)), atol=0, rtol=0)
    torch.testing.assert_close(spec.rotate(k, 3), spec.rotate(k, torch.full((5,), 3)), atol=0, rtol=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="sinks", budget=4, n_sink=4), "budget >= 5"),
    (dict(name="sink", budget=64), "did you mean 'sinks'"),
    (dict(name="h2o"), "needs a budget"),
    (dict(name="h2o", budget=1.5), "fraction"),
])
def test_bad_policies_are_one_clear_error(kwargs, message):
    with pytest.raises(UsageError, match=message):
        make_policy(**kwargs)


def test_fractional_budget_grows_with_the_stream(tiny_models, tokens):
    model = tiny_models["llama"]
    cache = PolicyCache(model, make_policy("h2o", budget=0.25), "original")
    _stream(model, cache, tokens)
    assert cache.stored() == math.ceil(0.25 * (T - 1)) + 1  # budget at the last eviction + the new token


@pytest.mark.parametrize("chunk", [1, 7])
def test_stored_stream_indices_are_the_tokens_seen_whatever_the_steps(tiny_models, chunk, tokens):
    """A prefill chunk, then single tokens, with a budget that grows: appends into headroom (whose stream
    indices are written ahead) mix with in-place evictions, and every slot still names a distinct token seen,
    the newest ones included."""
    model = tiny_models["llama"]
    cache = PolicyCache(model, make_policy("h2o", budget=0.4, n_sink=2), "original")
    with cache, torch.no_grad():
        fed = 0
        for step in [chunk, *[1] * 12, chunk, *[1] * 12]:
            model(tokens[:, fed:fed + step], past_key_values=cache)
            fed += step
            for layer in cache.layers:
                pos = layer.pos  # (B, H, S)
                assert pos.unique(dim=-1).shape[-1] == pos.shape[-1] and int(pos.max()) == fed - 1
                assert all((pos == t).any(-1).all() for t in range(fed - step, fed))  # the step's tokens are kept
        assert len(layer.keys[0, 0]) == pos.shape[-1] < fed  # and some were evicted


def test_the_cache_binds_only_its_own_model_and_only_inside_its_context(tiny_models, tokens):
    """The attention function reaches its cache through the attention modules the context binds,
    and its layer by their layer_idx: a forward without the cache inside the context is a plain
    forward, a second model streams through its own cache at the same time, and exit unbinds."""
    from attnlab.kv import attention

    llama, neox = tiny_models["llama"], tiny_models["gpt_neox"]
    with torch.no_grad():
        plain = llama(tokens).logits
        ref_neox = neox(tokens).logits
        with PolicyCache(llama, make_policy("full")) as c1, PolicyCache(neox, make_policy("full")) as c2:
            assert torch.equal(llama(tokens, use_cache=False).logits, plain)
            out1 = torch.cat([llama(tokens[:, t:t + 1], past_key_values=c1).logits for t in range(T)], 1)
            out2 = torch.cat([neox(tokens[:, t:t + 1], past_key_values=c2).logits for t in range(T)], 1)
    torch.testing.assert_close(out1, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out2, ref_neox, atol=1e-5, rtol=1e-5)
    assert len(attention.BOUND) == 0
    assert llama.config._attn_implementation == neox.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("arch", ROPE)
def test_a_stream_met_far_out_is_the_same_stream(tiny_models, arch, tokens):
    """``start``: the stream's first token at a far position. With a budget covering the stream it is a plain
    forward at shifted positions; under eviction with rolling positions, RoPE sees only relative angles, so
    the logits equal those of the stream started at 0 (to float precision: the model's fp32 angles at 10^4)."""
    model, start = tiny_models[arch], 10_000
    pos = torch.arange(start, start + T).expand(tokens.shape[0], T)
    with torch.no_grad():
        ref = model(tokens, position_ids=pos).logits
    out, _ = _stream(model, PolicyCache(model, _policy("full", None), start=start), tokens)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for policy in (n for n in EVICTING if getattr(_policy(n, 12), "n_sink", 0)):  # the policies that keep sinks
        near, kept_near = _stream(model, PolicyCache(model, _policy(policy, 12), "rolling"), tokens, True)
        far, kept = _stream(model, PolicyCache(model, _policy(policy, 12), "rolling", start=start), tokens, True)
        torch.testing.assert_close(far, near, atol=1e-3, rtol=1e-3)
        assert all(bool((p < 2).sum(-1).eq(2).all()) for p in kept[-1])  # the stream's own first tokens stay sinks
        if policy == "sinks":  # slots are stream indices either way: the same tokens kept
            assert all(torch.equal(a, b) for a, b in zip(kept[-1], kept_near[-1]))


@pytest.mark.parametrize("arch", ROPE)
@pytest.mark.parametrize("policy", EVICTING)
def test_a_saved_stream_resumes_exactly(tiny_models, arch, policy, tokens):
    """Stop a stream after eviction has begun, save the cache through torch.save, load it into a fresh cache:
    the rest of the stream gives the same logits, bit for bit, as the stream never stopped."""
    model, half, positions = tiny_models[arch], T // 2, _positions(policy, "rolling")
    whole, _ = _stream(model, PolicyCache(model, _policy(policy, 12), positions), tokens)
    first = PolicyCache(model, _policy(policy, 12), positions)
    _stream(model, first, tokens[:, :half])
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = PolicyCache(model, _policy(policy, 12), positions)
    resumed.load_state_dict(torch.load(buf))
    rest, _ = _stream(model, resumed, tokens[:, half:])
    assert torch.equal(rest, whole[:, half:])
    twin = PolicyCache(model, _policy(policy, 12), positions)
    twin.load_state_dict(first.state_dict())  # without torch.save: the two must not share slots
    for cache in (twin, first):
        assert torch.equal(_stream(model, cache, tokens[:, half:])[0], whole[:, half:])
    with pytest.raises(UsageError, match="same policy"):
        PolicyCache(model, _policy(policy, 16), positions).load_state_dict(first.state_dict())
    with pytest.raises(UsageError, match="not a cache state"):
        PolicyCache(model, _policy(policy, 12), positions).load_state_dict({"keys": torch.zeros(1)})
