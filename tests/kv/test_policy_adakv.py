"""Ada-KV, a KV policy in one file (attnlab/kv/policy_adakv.py): found by the registry, its options, and the paper's
rule -- after a prefill, a layer keeps its budget x heads highest-scored slots wherever they are (each head its
safeguard share first), so heads keep different counts; the rest are stored masked, never attended. Eviction
equals masking the evicted tokens in a dense forward (tests/kv/test_cache.py, every policy)."""
import pytest
import torch

from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from tiny_models import random_ids, tiny

T, BUDGET = 30, 10


def test_adakv_is_registered_and_a_method_with_its_options():
    assert "adakv" in POLICIES and make_policy("adakv", 8).shares_budget()
    assert methods.parse("adakv:budget=0.2,scorer=h2o,alpha=0.5").policy() == make_policy("adakv", 0.2, scorer="h2o",
                                                                                          alpha=0.5)
    for scorer in ("adakv", "sinks", "full"):  # a scorer must score each head's slots
        with pytest.raises(UsageError):
            make_policy("adakv", 8, scorer=scorer)


def test_the_allocation_is_the_layers_top_slots_after_each_heads_safeguard():
    policy = make_policy("adakv", 4, alpha=0.5)
    priority = torch.tensor([[[9.0, 8, 7, 6, 5, 4], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]])  # (B=1, H=2, S=6)
    visible = policy.allocate(priority, 4)  # 8 slots in all; each head's top 2 first
    assert visible[0, 0].tolist() == [True] * 6 and visible[0, 1].tolist() == [False] * 4 + [True] * 2


@pytest.mark.parametrize("scorer", ["h2o", "keydiff"])  # (SnapKV's 32-token window would fill this tiny budget)
def test_after_a_prefill_the_heads_share_the_budget_by_their_scores(scorer):
    model = tiny("llama", 6)
    ids = random_ids(T + 1, seed=11)
    plain = PolicyCache(model, make_policy(scorer, T + 5))  # the same scores, nothing evicted
    ada = PolicyCache(model, make_policy("adakv", BUDGET, scorer=scorer, alpha=0.0))  # the rule alone
    with torch.no_grad():
        with plain:
            model(ids[None, :T], past_key_values=plain)
        with ada:
            model(ids[None, :T], past_key_values=ada)
            model(ids[None, T:], past_key_values=ada)  # the next token: the layer's budget shared out, then stored
    counts = []
    for layer in range(model.config.num_hidden_layers):
        state = plain.layers[layer].state()
        priority = make_policy(scorer, BUDGET).priority(state)  # (1, H, T)
        expected = make_policy("adakv", BUDGET, scorer=scorer, alpha=0.0).allocate(priority, BUDGET)[0]  # (H, T)
        mine = ada.layers[layer]
        index = mine.pos[0].where(mine.valid[0], T + 1)  # (H, S): a masked slot to a column of its own
        visible = torch.zeros(expected.shape[0], T + 2, dtype=torch.bool).scatter_(-1, index, True)
        assert torch.equal(visible[:, :T], expected) and visible[:, T].all()  # the new token beside them
        counts += expected.sum(-1).tolist()
    assert sum(counts) == BUDGET * len(counts)
    # KeyDiff's heads keep different counts; H2O's sums favour every head's earliest tokens alike (each head's
    # first five outscore any head's later ones here), so its shares come out even
    if scorer == "keydiff":
        assert len(set(counts)) > 1
