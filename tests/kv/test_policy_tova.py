"""TOVA, a KV policy in one file (attnlab/kv/policy_tova.py): found by the registry, a method with its own
option, and exactly the paper's rule -- checked against a brute-force TOVA on a one-layer model, where a
dense forward with a hand-made mask row reproduces each streaming step."""
import pytest
import torch

from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from tiny_models import random_ids, tiny

T, BUDGET = 24, 6


def test_tova_is_registered_and_a_method_with_its_own_option():
    assert "tova" in POLICIES and make_policy("tova", 8, heads="each").heads == "each"
    assert methods.parse("tova:budget=0.2,heads=each").policy() == make_policy("tova", 0.2, heads="each")
    assert "heads=mean" in methods.describe(methods.load().get("tova"))
    with pytest.raises(UsageError, match="choose mean or each"):
        make_policy("tova", 8, heads="max")


def test_the_score_is_the_last_querys_attention_over_heads_or_per_head():
    probs = torch.rand(1, 2, 3, 4, 5).softmax(-1)  # (B, H, g, q, S)
    each = make_policy("tova", 8, heads="each").received(probs)
    assert torch.allclose(each, probs[:, :, :, -1].mean(2))
    mean = make_policy("tova", 8).received(probs)
    assert torch.allclose(mean, probs[:, :, :, -1].mean((1, 2))[:, None].expand(1, 2, 5))
    assert not make_policy("tova", 8).accumulates()


def _brute_force(model, ids: torch.Tensor, budget: int):
    """TOVA by hand on a one-layer model: at step t the cache holds the `budget` tokens the previous query
    attended to most (mean over heads), and t joins them; a dense forward whose mask row t shows exactly those
    gives step t's logits and attention (one layer: the keys and values do not depend on the mask)."""
    stored, score, logits, held = [], None, [], []
    for t in range(ids.numel()):
        if len(stored) > budget:  # evict the lowest-scored down to the budget before the new token enters
            top = score.topk(budget).indices.sort().values
            stored = [stored[i] for i in top]
        visible = stored + [t]
        mask = torch.full((1, 1, t + 1, t + 1), float("-inf")).triu(1)  # rows before t: causal (unused)
        mask[0, 0, t] = float("-inf")
        mask[0, 0, t, visible] = 0
        with torch.no_grad():
            out = model(ids[None, :t + 1], attention_mask=mask, output_attentions=True)
        logits.append(out.logits[0, t])
        score = out.attentions[0][0, :, t, visible].mean(0)  # (len(visible),): mean over the query heads
        stored = visible
        held.append(sorted(stored))
    return torch.stack(logits), held


def test_tova_streams_as_the_brute_force_rule():
    model = tiny("llama", 0, num_hidden_layers=1)
    model.set_attn_implementation("eager")
    ids = random_ids(T, seed=5)
    ref, held = _brute_force(model, ids, BUDGET)
    cache, got, kept = PolicyCache(model, make_policy("tova", BUDGET), "original"), [], []
    with cache, torch.no_grad():
        for t in range(T):
            got.append(model(ids[None, t:t + 1], past_key_values=cache).logits[0, -1])
            kept.append(cache.kept_positions(0)[0, 0].tolist())
    torch.testing.assert_close(torch.stack(got), ref, atol=1e-5, rtol=1e-5)
    assert kept == held and any(k != list(range(t - BUDGET, t + 1)) for t, k in enumerate(kept) if t > BUDGET)
