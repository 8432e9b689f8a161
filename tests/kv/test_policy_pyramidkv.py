"""PyramidKV, a KV policy in one file (attnlab/kv/policy_pyramidkv.py): found by the registry, its options, and
the paper's budgets -- from 2b - b/beta at the bottom layer to b/beta at the top on a straight line, their mean
the budget b -- each layer choosing by its scorer at its own budget. Eviction equals masking the evicted tokens
(tests/kv/test_cache.py, every policy)."""
import pytest
import torch

from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from tiny_models import random_ids, tiny


def test_pyramidkv_is_registered_and_a_method_with_its_options():
    assert "pyramidkv" in POLICIES
    p = methods.parse("pyramidkv:budget=0.2,scorer=h2o,beta=10").policy()
    assert p == make_policy("pyramidkv", 0.2, scorer="h2o", beta=10.0) and p.needs_scores
    assert not make_policy("pyramidkv", 0.2, scorer="keydiff").needs_scores
    for scorer in ("pyramidkv", "full", "nope"):
        with pytest.raises(UsageError):
            make_policy("pyramidkv", 0.2, scorer=scorer)


@pytest.mark.parametrize("budget, layers", [(0.2, 30), (256, 30), (0.3, 4), (64, 2)])
def test_the_budgets_form_a_pyramid_whose_mean_is_the_budget(budget, layers):
    p = make_policy("pyramidkv", budget, beta=20.0)
    budgets = [p.layer_budget(i, layers) for i in range(layers)]
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budget > budgets[-1]
    assert sum(budgets) / layers == pytest.approx(budget, rel=0.01 if isinstance(budget, int) else 1e-9)
    if isinstance(budget, float):  # the ends exactly; token budgets are rounded
        assert budgets[-1] == pytest.approx(budget / 20) and budgets[0] == pytest.approx(2 * budget - budget / 20)


def test_where_no_pyramid_fits_every_layer_keeps_the_budget():
    clipped = [make_policy("pyramidkv", 0.6).layer_budget(i, 8) for i in range(8)]  # the bottom past the context
    assert clipped[0] is None and clipped[-1] == pytest.approx(0.2) and sum(b or 1.0 for b in clipped) / 8 == \
        pytest.approx(0.6)  # kept whole at the bottom, 2 * 0.6 - 1 at the top, the mean kept
    sinks = make_policy("pyramidkv", 40, scorer="sinks")  # the top's 40/20 = 2 tokens: fewer than its 4 sinks + 1
    assert {sinks.layer_budget(i, 8) for i in range(8)} == {40}
    assert make_policy("pyramidkv", 40, scorer="h2o").layer_budget(7, 8) == 2  # h2o reserves nothing: it fits


def test_each_layer_evicts_by_its_scorer_at_its_own_budget():
    model = tiny("llama", 5, num_hidden_layers=3)
    ids = random_ids(40, seed=9)
    pyramid = make_policy("pyramidkv", 12, scorer="h2o", beta=4.0)
    cache = PolicyCache(model, pyramid, "original")
    with cache, torch.no_grad():
        for t in range(ids.numel()):
            model(ids[None, t:t + 1], past_key_values=cache)
    sizes = [cache.stored(i) for i in range(3)]
    assert sizes == [pyramid.layer_budget(i, 3) + 1 for i in range(3)] and sizes[0] > sizes[2]
    assert [cache.layers[i].policy for i in range(3)] == [make_policy("h2o", pyramid.layer_budget(i, 3))
                                                           for i in range(3)]
