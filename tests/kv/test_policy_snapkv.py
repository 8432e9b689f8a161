"""SnapKV, a KV policy in one file (attnlab/kv/policy_snapkv.py): found by the registry, a method with its options,
and the paper's rule -- after a prefill, the kept set is the one SnapKV computes from the dense forward's
attention (the last `window` queries' mean attention, averaged over each KV head's group, pooled over the keys
before the window, the window kept). Eviction equals masking the evicted tokens (tests/kv/test_cache.py, every
policy)."""
import pytest
import torch
import torch.nn.functional as F

from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from tiny_models import random_ids, tiny

T, BUDGET, WINDOW = 24, 10, 4


def test_snapkv_is_registered_and_a_method_with_its_options():
    assert "snapkv" in POLICIES and make_policy("snapkv", 8, window=4, kernel=3).kernel == 3
    assert methods.parse("snapkv:budget=0.2,window=16").policy() == make_policy("snapkv", 0.2, window=16)
    with pytest.raises(UsageError, match="odd width"):
        make_policy("snapkv", 8, kernel=4)


def test_the_ring_keeps_the_last_window_queries_attention_apart():
    policy = make_policy("snapkv", 8, window=3)
    score = torch.zeros(1, 1, 5, 3)
    steps = [torch.rand(1, 1, 2, 1, 5) for _ in range(4)]  # (B, H, g, q=1, S)
    for probs in steps:
        policy.fold(score, probs)
    expected = torch.stack([p[0, 0].mean(0)[0] for p in steps[-3:]], -1)  # (S, 3): oldest first
    torch.testing.assert_close(score[0, 0], expected)
    chunk = torch.rand(1, 1, 2, 5, 5)  # a step of 5 queries >= the window: its last 3 alone
    policy.fold(score, chunk)
    torch.testing.assert_close(score[0, 0], chunk[0, 0].mean(0)[-3:].T)


def _snapkv_by_hand(attention: torch.Tensor, hkv: int, keep: int, window: int, kernel: int) -> torch.Tensor:
    """SnapKV's choice from one layer's dense attention (1, Hq, T, T): (Hkv, keep) sorted positions."""
    t = attention.shape[-1]
    obs = attention[0, :, -window:, :t - window].mean(1)  # (Hq, T - w): the window's mean attention
    pooled = F.avg_pool1d(obs[:, None], kernel, stride=1, padding=kernel // 2)[:, 0]
    per_kv = pooled.view(hkv, -1, t - window).mean(1)  # (Hkv, T - w): over each group's query heads
    chosen = per_kv.topk(keep - window, dim=-1).indices
    return torch.cat([chosen, torch.arange(t - window, t).expand(hkv, window)], -1).sort(-1).values


def test_after_a_prefill_snapkv_keeps_what_the_paper_computes():
    model = tiny("llama", 3)
    ids = random_ids(T + 1, seed=7)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        dense = model(ids[None, :T], output_attentions=True).attentions  # per layer (1, Hq, T, T)
    cache = PolicyCache(model, make_policy("snapkv", BUDGET, window=WINDOW), "original")
    with cache, torch.no_grad():
        model(ids[None, :T], past_key_values=cache)  # the prefill: nothing evicted, the window's attention kept
        model(ids[None, T:], past_key_values=cache)  # the next token: evict down to the budget, then store it
    hkv = model.config.num_key_value_heads
    for layer, attention in enumerate(dense):
        kept = cache.kept_positions(layer)[0]  # (Hkv, BUDGET + 1)
        torch.testing.assert_close(kept[:, :-1], _snapkv_by_hand(attention, hkv, BUDGET, WINDOW, 5))
        assert (kept[:, -1] == T).all()
        assert any(k.tolist() != list(range(T - BUDGET, T)) for k in kept[:, :-1])  # not a plain window
