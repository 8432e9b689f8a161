"""Rolling positions' owed rotations (attnlab.kv.rolling): keys that owe their rotations, paid through the query,
give the choices and the logits of keys rotated at each eviction."""
from dataclasses import dataclass

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.kv.policy_classic import H2O
from attnlab.models.rotary import RopeSpec
from tiny_models import ROPE_ARCHS, V

T = 48
# the policies that may owe: they score on materialised attention and share no budget (rolling refuses those)
OWING = [n for n in POLICIES.names() if POLICIES.get(n).needs_budget and make_policy(n, 8).needs_scores
         and not make_policy(n, 8).shares_budget()]


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(3))


def _run(model, policy, tokens, lag_limit):
    """Token by token through a rolling cache: logits (B, T, V), each step's kept stream indices per layer
    (sorted), the most rotations any key owed, and the cache."""
    cache = PolicyCache(model, policy, "rolling", lag_limit=lag_limit)
    logits, kept, most = [], [], 0
    with cache, torch.no_grad():
        for t in range(tokens.shape[1]):
            logits.append(model(tokens[:, t:t + 1], past_key_values=cache).logits)
            kept.append([layer.pos.sort(-1).values for layer in cache.layers])
            most = max([most] + [int(layer.rolling.lag.max()) for layer in cache.layers if layer.rolling.turns])
    return torch.cat(logits, 1), kept, most, cache


@pytest.mark.parametrize("arch", ROPE_ARCHS)
@pytest.mark.parametrize("name", OWING)
def test_owed_rotations_keep_every_choice_and_logit(tiny_models, arch, name, tokens):
    """The same kept sets step by step and the same logits (to float rounding) as rotating at each eviction,
    with keys that really owed several rotations, and fewer keys rotated."""
    model = tiny_models[arch]
    policy = make_policy(name, budget=12, n_sink=2, recent=4)
    now, kept_now, owed_now, cache_now = _run(model, policy, tokens, lag_limit=0)
    lazy, kept_lazy, owed_lazy, cache_lazy = _run(model, policy, tokens, lag_limit=3)
    assert owed_now == 0 and owed_lazy >= 2  # the lazy run owed, more than one rotation at a time
    for step_now, step_lazy in zip(kept_now, kept_lazy):
        for a, b in zip(step_now, step_lazy):
            assert torch.equal(a, b)
    torch.testing.assert_close(lazy, now, atol=1e-5, rtol=1e-4)
    assert cache_lazy.layers[0].rerotated < cache_now.layers[0].rerotated


def test_turn_back_is_rotate_by_minus_o():
    """turn_back's row o is rotate's turn by -o, partial rotary included (dims past rot_dims pass through)."""
    for rot in (8, 6):  # full and partial rotary on D = 8
        rope = RopeSpec(1.0 / 10000 ** (torch.arange(0, rot, 2).float() / rot), rot)
        x = torch.randn(5, 8)
        turned = rope.turn_back(x, 4)  # (5, 4, 8)
        for o in range(4):
            torch.testing.assert_close(turned[:, o], rope.rotate(x, -o))
        assert torch.equal(turned[:, :, rot:], x[:, None, rot:].expand(5, 4, 8 - rot))


@dataclass(frozen=True)
class _H2OReadingKeys(H2O):
    reads_keys = True  # as a scored policy whose priority also reads the keys would say


def test_a_policy_that_reads_keys_never_owes(tiny_models, tokens):
    """Its priority must see every key rotated, so its layers rotate at each eviction."""
    model = tiny_models["llama"]
    _, _, owed, cache = _run(model, _H2OReadingKeys(budget=12), tokens, lag_limit=3)
    assert owed == 0 and cache.layers[0].rerotated > 0
    _, _, owed, _ = _run(model, H2O(budget=12), tokens, lag_limit=3)
    assert owed > 0  # the same policy without reads_keys does owe


@pytest.mark.parametrize("bad", [-1, 2.5, "4"])
def test_a_bad_lag_limit_is_one_clear_error(tiny_models, bad):
    with pytest.raises(UsageError, match="lag_limit"):
        PolicyCache(tiny_models["llama"], H2O(budget=12), "rolling", lag_limit=bad)


def test_a_saved_stream_resumes_exactly_while_keys_owe(tiny_models, tokens):
    """The owed rotations travel with the saved state: the rest of the stream is bit for bit the stream that never
    stopped (settling at the save would round differently)."""
    model, half = tiny_models["llama"], T // 2 + 1
    whole = _run(model, H2O(budget=12), tokens, lag_limit=3)[0]
    first = _run(model, H2O(budget=12), tokens[:, :half], lag_limit=3)[3]
    state = first.state_dict()
    assert all(layer["owed"] is not None for layer in state["layers"])  # saved while the keys owed
    resumed = PolicyCache(model, H2O(budget=12), "rolling", lag_limit=3)
    resumed.load_state_dict(state)
    with resumed, torch.no_grad():
        rest = torch.cat([model(tokens[:, t:t + 1], past_key_values=resumed).logits for t in range(half, T)], 1)
    assert torch.equal(rest, whole[:, half:])
