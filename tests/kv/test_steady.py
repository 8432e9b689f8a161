"""The evicting caches' compiled steady step (attnlab.kv.steady): the eager PolicyCache's kept slots and logits,
step by step, for every policy one static graph holds; clear refusals for those it does not."""
import pytest
import torch
from torch._dynamo.utils import counters

from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.kv.steady import CompiledPolicyDecode, check_steady
from tiny_models import V

T, BUDGET = 40, 12
OPTIONS = dict(n_sink=2, recent=4)


def steady_policies() -> list[str]:
    """The registry's policies a steady step holds (check_steady is the one rule)."""
    names = []
    for name in POLICIES.names():
        try:
            check_steady(make_policy(name, BUDGET, **OPTIONS))
        except UsageError:
            continue
        names.append(name)
    return names


@pytest.fixture(scope="module")
def stream():
    # distinct tokens: a repeated token's layer-0 key has the same norm wherever it sits, and KNorm's exact ties
    # may break either way between eager and compiled code
    return torch.randperm(V, generator=torch.Generator().manual_seed(5))[:T][None]


@torch.no_grad()
def eager_run(model, policy, positions, ids):
    """Token by token through PolicyCache: logits (T, V) and each step's kept stream indices per layer, sorted."""
    cache, logits, kept = PolicyCache(model, policy, positions), [], []
    with cache:
        for t in range(ids.shape[1]):
            logits.append(model(ids[:, t:t + 1], past_key_values=cache).logits[:, -1])
            kept.append([layer.pos.sort(-1).values for layer in cache.layers])
    return torch.cat(logits), kept


def compiled_run(dec, ids):
    logits, kept = [dec.prefill(ids[:, :1])], [None]
    for t in range(1, ids.shape[1]):
        logits.append(dec.step(ids[:, t:t + 1]))
        layers = (dec.eager or dec.cache).layers
        kept.append([layer.pos.sort(-1).values for layer in layers])
    return torch.cat(logits), kept


def assert_same_as_eager(model, name, positions, ids):
    policy = make_policy(name, BUDGET, **OPTIONS)
    want, kept_eager = eager_run(model, policy, positions, ids)
    dec = CompiledPolicyDecode(model, policy, positions)
    got, kept = compiled_run(dec, ids)
    assert dec.eager is None, "the stream never reached the steady step: nothing compiled was compared"
    for t in range(1, ids.shape[1]):
        for a, b in zip(kept_eager[t], kept[t]):
            assert torch.equal(a, b), f"step {t}: kept {b.tolist()}, eager kept {a.tolist()}"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    return dec, got


@pytest.mark.parametrize("name", steady_policies())
def test_the_steady_step_keeps_and_writes_what_the_eager_cache_does(tiny_models, name, stream):
    """Rolling positions (the kept keys older than each evicted one rotated inside the graph) on Llama."""
    assert_same_as_eager(tiny_models["llama"], name, "rolling", stream)


@pytest.mark.parametrize("arch,name,positions", [("llama", "sinks", "original"), ("llama", "h2o", "original"),
                                                 ("gpt_neox", "h2o", "rolling"), ("gpt2", "h2o", "original")])
def test_original_positions_partial_rotary_and_learned_positions(tiny_models, arch, name, positions, stream):
    """Original positions (nothing rotated), GPT-NeoX's partial rotary, GPT-2's learned positions."""
    assert_same_as_eager(tiny_models[arch], name, positions, stream)


def test_a_second_stream_reuses_the_graph_and_starts_afresh(tiny_models, stream):
    """prefill starts the stream over: the static buffers take the new stream's slots, nothing stale is read, and
    no graph is compiled again."""
    model = tiny_models["llama"]
    dec = CompiledPolicyDecode(model, make_policy("h2o", BUDGET, **OPTIONS), "rolling")
    dec.warm(stream)
    graphs = counters["stats"]["unique_graphs"]  # the one graph, compiled on the warm-up's first steady step
    first, _ = compiled_run(dec, stream)
    torch.testing.assert_close(first, eager_run(model, dec.policy, "rolling", stream)[0], rtol=1e-4, atol=1e-5)
    again, _ = compiled_run(dec, stream)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    other = stream.flip(-1)
    want, _ = eager_run(model, make_policy("h2o", BUDGET, **OPTIONS), "rolling", other)
    got, _ = compiled_run(dec, other)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == graphs  # every steady step of every stream through that graph


@pytest.mark.parametrize("policy,says", [(make_policy("full"), "never evicts"),
                                         (make_policy("h2o", 0.5), "a share of the stream"),
                                         (make_policy("adakv", BUDGET), "shares a layer's budget")])
def test_a_policy_without_a_steady_graph_is_refused_in_one_line(tiny_models, policy, says):
    with pytest.raises(UsageError, match=says) as e:
        CompiledPolicyDecode(tiny_models["llama"], policy)
    assert "\n" not in str(e.value)


def test_a_batch_is_refused_in_one_line(tiny_models, stream):
    dec = CompiledPolicyDecode(tiny_models["llama"], make_policy("sinks", BUDGET, n_sink=2))
    with pytest.raises(UsageError, match="one sequence"):
        dec.prefill(stream.expand(2, -1))


def test_warm_compiles_on_a_prompt_shorter_than_the_budget(tiny_models, stream):
    """A prompt that does not fill the cache is repeated until it does: the step is compiled, and the stream
    decoded after it is the eager cache's."""
    model = tiny_models["llama"]
    dec = CompiledPolicyDecode(model, make_policy("sinks", BUDGET, n_sink=2))
    dec.warm(stream[:, :3])
    assert dec.eager is None  # the warm-up reached the compiled step
    got, _ = compiled_run(dec, stream)
    want, _ = eager_run(model, make_policy("sinks", BUDGET, n_sink=2), "rolling", stream)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
