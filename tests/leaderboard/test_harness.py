"""The two regimes on a tiny model with a byte tokenizer: at ratio 0 both answer as the full cache does; the
prefill regime compresses once, keeping what the policy would keep of the whole context; the decode regime
never holds more than the budget and a step."""
import pytest
import torch
from transformers import DynamicCache

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.leaderboard.harness import answer, ids_of
from attnlab.leaderboard.regimes import Once, in_regime, kept_tokens
from attnlab.leaderboard.tasks import Item
from tiny_models import byte_tokenizer, tiny

ITEM = Item("niah_single", "Hide: the magic number for owl is 4711. " * 4 + "The end. ",
            "\nWhat is the magic number for owl? It is", ("4711",))
SCORED = ["h2o", "tova", "snapkv", "keydiff", "sinks", "pyramidkv"]


@pytest.fixture(scope="module")
def model():
    return tiny("llama", 0, vocab_size=300, max_position_embeddings=512)


@pytest.fixture(scope="module")
def tok():
    t = byte_tokenizer()
    t.eos_token = None
    return t


def _greedy_full(model, ids, max_new):
    cache, new = DynamicCache(config=model.config), []
    out = model(torch.tensor([ids]), past_key_values=cache)
    new.append(int(out.logits[0, -1].argmax()))
    while len(new) < max_new:
        new.append(int(model(torch.tensor([new[-1:]]), past_key_values=cache).logits[0, -1].argmax()))
    return new


@pytest.mark.parametrize("regime", ["prefill", "decode"])
@pytest.mark.parametrize("policy", ["full", *(p for p in SCORED if p != "pyramidkv")])  # a token budget spread
def test_at_ratio_0_every_policy_answers_as_the_full_cache(model, tok, policy, regime):  # over layers evicts
    """Prefill: every token. Decode: the first (the question is stored beside the whole context; then the
    answer's tokens evict, as decoding does)."""
    context, question = ids_of(tok, ITEM)
    with torch.no_grad():
        expected = _greedy_full(model, context + question, 8)
    got = answer(model, tok, ITEM, policy, 0.0, regime, max_new=8 if regime == "prefill" else 1, chunk=16)
    assert got.prediction == tok.decode(expected[:got.new_tokens]) and got.kept_context == len(context)


@pytest.mark.parametrize("policy", SCORED)
def test_the_prefill_regime_compresses_once_as_the_policy_would(model, tok, policy):
    context, question = ids_of(tok, ITEM)
    k = kept_tokens(0.5, len(context))
    got = answer(model, tok, ITEM, policy, 0.5, "prefill", max_new=4, prefill_chunk=64)
    layers = model.config.num_hidden_layers
    assert got.kept_context == make_policy(policy, k).for_layer(0, layers).capacity(len(context))  # k (a pyramid:
    # its bottom layer's share)
    once = PolicyCache(model, in_regime(make_policy(policy, k), "prefill", len(context)))
    plain = PolicyCache(model, make_policy(policy, k))  # the whole context in one forward, then one token
    with torch.no_grad():
        with once:
            model(torch.tensor([context]), past_key_values=once)
            model(torch.tensor([question]), past_key_values=once)
        with plain:
            model(torch.tensor([context]), past_key_values=plain)
            model(torch.tensor([question[:1]]), past_key_values=plain)
    for layer in range(model.config.num_hidden_layers):
        mine, theirs = once.kept_positions(layer), plain.kept_positions(layer)
        assert torch.equal(mine[..., :-len(question)], theirs[..., :-1])  # the same context tokens chosen
        assert torch.equal(mine[..., -len(question):], torch.arange(len(context), len(context) + len(question))
                           .expand_as(mine[..., -len(question):]))  # and every question token kept


@pytest.mark.parametrize("policy", SCORED)
def test_the_decode_regime_holds_its_budget_of_context_beside_the_question(model, tok, policy):
    context, _ = ids_of(tok, ITEM)
    k = kept_tokens(0.75, len(context))
    got = answer(model, tok, ITEM, policy, 0.75, "decode", max_new=4, chunk=8)
    budget = make_policy(policy, k).for_layer(0, model.config.num_hidden_layers).capacity(len(context))
    assert got.kept_context == budget  # k context tokens beside the question (a pyramid: its bottom's share)


def test_once_needs_a_policy_and_a_context_and_ratios_lie_in_0_1():
    with pytest.raises(UsageError):
        Once(inner=make_policy("h2o", 8), context=0)
    with pytest.raises(UsageError, match="in \\[0, 1\\)"):
        kept_tokens(1.0, 100)
    with pytest.raises(UsageError, match="prefill or decode"):
        in_regime(make_policy("h2o", 8), "stream", 100)
    assert kept_tokens(0.875, 100) == 12 and isinstance(in_regime(make_policy("h2o", 8), "decode", 100), type(
        make_policy("h2o", 8)))


@pytest.mark.parametrize("regime", ["prefill", "decode"])
@pytest.mark.parametrize("policy", [*SCORED, "adakv", "knorm", "sinks+h2o", "window"])
def test_every_policy_answers_in_both_regimes_though_its_layers_store_different_counts(model, tok, policy, regime):
    # Ada-KV's heads keep different counts, so its layers store different numbers of slots, and the model sizes
    # one mask on layer 0's: the attention reads each new token's padding from that mask's last columns
    context, _ = ids_of(tok, ITEM)
    got = answer(model, tok, ITEM, policy, 0.75, regime, max_new=3, chunk=8, prefill_chunk=64)
    assert 0 < got.kept_context <= len(context) and got.new_tokens == 3


@pytest.mark.parametrize("policy", [*SCORED, "adakv", "knorm"])
def test_one_prefill_serves_every_ratio_exactly_as_a_prefill_per_ratio(model, tok, policy):
    from attnlab.leaderboard.harness import answers_once

    ratios = (0.25, 0.5, 0.875)
    shared = answers_once(model, tok, ITEM, policy, ratios, max_new=4, prefill_chunk=64)
    for ratio, got in zip(ratios, shared):
        alone = answer(model, tok, ITEM, policy, ratio, "prefill", max_new=4, prefill_chunk=64)
        assert (got.prediction, got.kept_context, got.kv_bytes) == (alone.prediction, alone.kept_context,
                                                                    alone.kv_bytes)
    assert len({a.kept_context for a in shared}) == len(ratios)  # the ratios kept different counts
