"""Methods as one concept: every policy, scaling, rule and scheme is a method; one parser reads them; one stack
enters them in one order, composes them exactly as nesting them by hand does, and restores the model."""
import itertools

import pytest
import torch

import attnlab
from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import POLICIES, make_policy
from attnlab.quant.schemes import SCHEMES
from attnlab.quant.transform import QuantizedWeights
from attnlab.rope.apply import ScaledRope
from attnlab.rope.scalings import SCALINGS, make_scaling
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.registry import RULES
from attnlab.sparsity.rules import Oracle
from tiny_models import ARCHS, ROPE_ARCHS, random_ids, tiny

T, NEW = 10, 6
# one method of each kind that needs nothing but the model, and what entering it means by hand
BY_HAND = {"weights": ("int8", lambda m: QuantizedWeights(m, "int8")),
           "rope": ("ntk:factor=2", lambda m: ScaledRope(m, make_scaling("ntk", 2.0))),
           "mlp": ("oracle:keep=0.5", lambda m: SparseMLP(m, Oracle(0.5))),
           "kv": ("h2o:budget=8", None)}  # a cache, handed to generate


def _gen(model, ids, cache=None):
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True, past_key_values=cache)
    return out.sequences, torch.stack(out.scores)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_every_registered_mechanism_is_a_method_of_its_kind():
    m = methods.load()
    expect = ({n: "kv" for n in POLICIES} | {n: "rope" for n in SCALINGS if n != "none"}
              | {n: "mlp" for n in RULES} | {n: "weights" for n in SCHEMES})
    assert {n: m.get(n).kind for n in m} == expect


@pytest.mark.parametrize("name", methods.load().names())
def test_a_method_written_as_its_spec_reads_back_equal(name):
    cls = methods.load().get(name)
    given = "budget=8" if cls.kind == "kv" and name != "full" else ""
    m = methods.parse(f"{name}:{given}")
    assert methods.parse(m.spec()) == m and m.spec().startswith(name)
    assert name in methods.describe(cls) and all(f.name in methods.describe(cls) for f in cls.options())


def test_options_are_the_mechanisms_own_fields():
    assert [f.name for f in methods.load().get("yarn").options()] == ["factor", "beta_fast", "beta_slow"]
    assert [f.name for f in methods.load().get("sinks+h2o").options()] == ["budget", "recent", "n_sink", "positions",
                                                                             "lag_limit"]
    h2o = methods.parse("h2o:budget=0.2,recent=16,positions=rolling")
    assert h2o.policy() == make_policy("h2o", 0.2, recent=16) and h2o.positions == "rolling"
    assert methods.parse("yarn:factor=4,beta_fast=16").scaling() == SCALINGS.get("yarn")(4.0, 16.0, 1.0)


@pytest.mark.parametrize("spec, says", [
    ("h2oo", "did you mean 'h2o'?"),
    ("h2o:budget=0.2,recnt=3", "h2o has no option 'recnt'; did you mean 'recent'?"),
    ("yarn:factor=0.5", "need factor >= 1"),
    ("oracle:keep=1.5", "need keep in (0, 1]"),
    ("int8:lm_head=maybe", "expected a value of type bool"),
    ("sinks:budget=3", "leaves no room beyond 4 sink(s)"),
    ("h2o:budget", "write NAME:key=value"),
    ("h2o:budget=nan", "not NaN"),
    ("sinks:budget=64,positions=sideways", "choose original or rolling"),
    ("cats:mode=fast", "choose mask, gather or kernel"),
])
def test_bad_methods_are_one_line(spec, says):
    with pytest.raises(UsageError) as e:
        methods.parse(spec)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_two_of_a_kind_are_refused_and_the_order_is_the_stacks():
    with pytest.raises(UsageError, match="one KV-cache policy at a time"):
        methods.ordered(["h2o:budget=8", "sinks:budget=8"])
    got = methods.ordered(["h2o:budget=8", "oracle", "yarn", "int8"])
    assert [m.kind for m in got] == list(methods.KINDS)
    assert methods.parse_list("int8; h2o:budget=0.2") == [methods.parse("int8"), methods.parse("h2o:budget=0.2")]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_stack_restores_the_model_bit_for_bit(arch):
    model, ids = tiny(arch), random_ids(T)[None]
    before, state = _logits(model, ids), {k: v.clone() for k, v in model.state_dict().items()}
    specs = ["int8", "oracle:keep=0.5", "sinks:budget=8,n_sink=2"] + (["yarn:factor=2"] if arch in ROPE_ARCHS else [])
    with attnlab.apply(model, *specs) as applied:
        assert [m.kind for m in applied.methods] == [k for k in methods.KINDS if arch in ROPE_ARCHS or k != "rope"]
        assert not torch.equal(_logits(model, ids), before)
        _gen(model, ids)
    assert torch.equal(_logits(model, ids), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert "generate" not in model.__dict__ and not any("forward" in m.__dict__ for m in model.modules())


def test_the_stack_restores_the_model_when_the_body_raises():
    model, ids = tiny("llama"), random_ids(T)[None]
    before = _logits(model, ids)
    with pytest.raises(RuntimeError), attnlab.apply(model, "int8", "ntk", "oracle", "h2o:budget=8"):
        raise RuntimeError
    assert torch.equal(_logits(model, ids), before) and "generate" not in model.__dict__


@pytest.mark.parametrize("a, b", list(itertools.combinations(methods.KINDS, 2)))
def test_each_pair_of_kinds_equals_nesting_them_by_hand(a, b):
    """The stack's output is the by-hand nesting's, in the stack's order, bit for bit."""
    model, ids = tiny("llama"), random_ids(T, seed=1)[None]
    with attnlab.apply(model, BY_HAND[b][0], BY_HAND[a][0]):  # given out of order: the stack orders them
        seq, scores = _gen(model, ids)
    with _by_hand(model, [k for k in (a, b) if k != "kv"]):
        kv = "kv" in (a, b)
        cache = PolicyCache(model, make_policy("h2o", 8), "original") if kv else None
        with cache if kv else torch.no_grad():
            seq_hand, scores_hand = _gen(model, ids, cache)
    assert torch.equal(seq, seq_hand) and torch.equal(scores, scores_hand)


def _by_hand(model, kinds):
    import contextlib

    stack = contextlib.ExitStack()
    for k in kinds:
        stack.enter_context(BY_HAND[k][1](model))
    return stack


def test_methods_that_change_nothing_equal_the_dense_model():
    model, ids = tiny("llama"), random_ids(T, seed=2)[None]
    dense = _gen(model, ids)
    for specs in ([], ["full"], ["yarn:factor=1"], ["oracle:keep=1"], ["full", "pi:factor=1", "oracle:keep=1"]):
        with attnlab.apply(model, *specs):
            got = _gen(model, ids)
        assert torch.equal(got[0], dense[0]) and torch.equal(got[1], dense[1]), specs


def test_an_evicting_policy_changes_generate_and_its_handle_makes_caches():
    model, ids = tiny("llama"), random_ids(T, seed=4)[None]
    dense = _gen(model, ids)
    with attnlab.apply(model, "window:budget=4") as applied:
        evicted = _gen(model, ids)
        with applied.handle("kv").cache() as cache:
            own = _gen(model, ids, cache)
    assert not torch.equal(evicted[1], dense[1]) and torch.equal(own[1], evicted[1])
    assert applied.spec() == "window:budget=4"


def test_a_kv_methods_lag_limit_reaches_its_caches():
    """``lag_limit`` is the cache's option, not the policy's: generate's cache and the handle's own caches owe
    their rotations, and generate decodes what rotating at each eviction decodes."""
    model, ids = tiny("llama"), random_ids(T, seed=4)[None]
    with attnlab.apply(model, "h2o:budget=6,positions=rolling") as applied:
        at_once = _gen(model, ids)
    with attnlab.apply(model, "h2o:budget=6,positions=rolling,lag_limit=3") as applied:
        owed = _gen(model, ids)
        with applied.handle("kv").cache() as cache:
            _gen(model, ids, cache)
    assert torch.equal(owed[0], at_once[0]) and torch.allclose(owed[1], at_once[1], atol=1e-5)
    assert all(layer.lag_limit == 3 for layer in cache.layers) and cache.layers[0].rolling.turns > 0
    with pytest.raises(UsageError, match="lag_limit"):
        attnlab.apply(model, "h2o:budget=6,positions=rolling,lag_limit=-1").__enter__()


def test_a_rule_that_calibrates_needs_the_tokenizer():
    with pytest.raises(UsageError, match="give the model's tokenizer"), attnlab.apply(tiny("llama"), "cats"):
        pass


def test_the_readmes_example_runs_on_a_hugging_face_model():
    """The README's Python lines, as printed, on a tiny llama: generate runs through the methods, and the model
    is itself again after the block."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    (code,) = re.findall(r"## Methods, composed.*?```python\n(.*?)```", readme, re.S)
    model, ids = tiny("llama"), random_ids(T, seed=6)[None]
    before = _logits(model, ids)
    scope = {"model": model, "ids": ids}
    exec(code, scope)  # noqa: S102 -- the README's own lines
    assert T < scope["out"].shape[1] <= T + 64 and torch.equal(_logits(model, ids), before)
