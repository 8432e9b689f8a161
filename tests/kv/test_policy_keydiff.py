"""KeyDiff, a KV policy in one file (attnlab/kv/policy_keydiff.py): found by the registry, and the paper's rule --
after a prefill, each KV head keeps the keys least similar to the mean unit key, computed here from the keys of
a plain forward. Eviction equals masking the evicted tokens (tests/kv/test_cache.py, every policy)."""
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from attnlab import methods
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from tiny_models import random_ids, tiny

T, BUDGET = 24, 10


def test_keydiff_is_registered_and_a_method():
    assert "keydiff" in POLICIES and methods.parse("keydiff:budget=0.2").policy() == make_policy("keydiff", 0.2)


def test_after_a_prefill_keydiff_keeps_the_keys_least_like_the_mean_direction():
    model = tiny("llama", 4)
    ids = random_ids(T + 1, seed=8)
    plain = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[None, :T], past_key_values=plain, use_cache=True)
    cache = PolicyCache(model, make_policy("keydiff", BUDGET), "original")
    with cache, torch.no_grad():
        model(ids[None, :T], past_key_values=cache)
        model(ids[None, T:], past_key_values=cache)
    for layer in range(model.config.num_hidden_layers):
        keys = plain.layers[layer].keys[0]  # (Hkv, T, D), post-RoPE as stored
        unit = F.normalize(keys, dim=-1)
        similarity = F.cosine_similarity(unit, unit.mean(1, keepdim=True), dim=-1)  # (Hkv, T)
        expected = similarity.topk(BUDGET, dim=-1, largest=False).indices.sort(-1).values
        kept = cache.kept_positions(layer)[0]
        assert torch.equal(kept[:, :-1], expected) and (kept[:, -1] == T).all()
        assert any(k.tolist() != list(range(T - BUDGET, T)) for k in kept[:, :-1])  # not a plain window
