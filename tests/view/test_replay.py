"""Eviction replay: the kept sets are the real cache's. Several policies as the rows of one batch keep exactly
what each keeps alone; window and sinks keep the positions their definitions name; the cache holds the
budget plus the step's tokens."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.kv.policies import make_policy
from attnlab.kv.rows import RowPolicies
from attnlab.view.replay import policies_for, replay
from tiny_models import random_ids, tiny

T, BUDGET = 40, 12


@pytest.fixture(scope="module")
def model():
    return tiny("llama")


@pytest.mark.parametrize("chunk", [1, 5])
def test_policies_as_rows_of_one_batch_keep_what_each_keeps_alone(model, chunk):
    # distinct tokens: a repeated token has the same layer-0 key, so knorm's scores tie exactly and float
    # rounding breaks the tie -- differently for a batch of 5 than of 1 on some CPUs (seen on an Intel Xeon)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(1))[:T]
    policies = policies_for(("window", "sinks", "h2o", "sinks+h2o", "knorm", "tova", "snapkv", "keydiff", "pyramidkv"),
                            (BUDGET,), 4)  # a pyramid replays in a batch of its own (its layers keep their own)
    together = replay(model, ids, policies, chunk)
    for p, r in zip(policies, together):
        (alone,) = replay(model, ids, [p], chunk)
        assert r.policy == p.name and r.ends == alone.ends
        assert torch.equal(r.kept, alone.kept), p.name


@pytest.mark.parametrize("chunk", [1, 3])
def test_window_and_sinks_keep_the_positions_they_name_and_the_cache_holds_budget_plus_step(model, chunk):
    ids = random_ids(T, seed=2)
    window, sinks, h2o = replay(model, ids, policies_for(("window", "sinks", "h2o"), (BUDGET,), 4), chunk)
    n_layers, n_kv = window.kept.shape[1:3]
    for s, (start, end) in enumerate(zip([0] + window.ends, window.ends)):
        held = min(end, BUDGET + end - start)  # evicted down to the budget, then the step's own tokens stored
        recent = torch.zeros(T, dtype=torch.bool)
        recent[end - held:end] = True
        assert torch.equal(window.kept[s], recent.expand(n_layers, n_kv, T))
        first = torch.zeros(T, dtype=torch.bool)
        first[:min(4, end)] = True  # the sinks, and the most recent tokens in the rest of the slots
        first[end - (held - min(4, end)):end] = True
        assert torch.equal(sinks.kept[s], first.expand(n_layers, n_kv, T))
        assert (h2o.kept[s].sum(-1) == held).all() and h2o.kept[s, ..., end:].sum() == 0


def test_rows_of_one_batch_must_keep_as_many_slots():
    with pytest.raises(UsageError, match="one budget"):
        RowPolicies(rows=(make_policy("window", 8), make_policy("window", 16)))
    with pytest.raises(UsageError, match="one budget"):  # a fraction: sinks reserve 4 slots, window none
        RowPolicies(rows=(make_policy("window", 0.2), make_policy("sinks", 0.2)))
    assert RowPolicies(rows=(make_policy("window", 0.2), make_policy("h2o", 0.2))).budget == 0.2


@pytest.mark.parametrize("name", ["h2o", "tova", "snapkv", "keydiff", "pyramidkv", "adakv"])
def test_a_replay_keeps_what_the_policys_own_cache_keeps(model, name):
    """Not only rows against rows: the replay (always a batch of RowPolicies) against the policy's own cache,
    which caught a TOVA replay folding its scores as H2O's."""
    from attnlab.kv.cache import PolicyCache

    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(1))[:T]
    (p,) = policies_for((name,), (BUDGET,), 4)
    (r,) = replay(model, ids, [p], 1)
    cache = PolicyCache(model, p)
    with cache, torch.no_grad():
        for t in range(T):
            model(ids[None, t:t + 1], past_key_values=cache)
    for layer in range(model.config.num_hidden_layers):
        slots = cache.layers[layer]
        index = slots.pos[0].where(slots.valid[0], T)  # (H_kv, S): a masked slot (Ada-KV's) to a column of its own
        own = torch.zeros(index.shape[0], T + 1, dtype=torch.bool).scatter_(-1, index, True)[:, :T]
        assert torch.equal(r.kept[-1, layer], own), (name, layer)
        assert torch.equal(cache.kept_mask(layer, T)[0], own)
    if name == "adakv":  # heads keep different counts, as the page then shows
        assert len({int(n) for n in r.kept[-1].sum(-1).flatten()}) > 1
