"""CompiledDecode: the compiled static-cache step writes the eager DynamicCache decode's logits."""
import re

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from transformers import DynamicCache

from attnlab import methods
from attnlab.core.errors import UsageError
from attnlab.evals.streaming import decoder_nll, stream_nll
from attnlab.models import compiled
from attnlab.models.compiled import CompiledDecode
from attnlab.quant.transform import QuantizedWeights
from tiny_models import random_ids, tiny


@torch.no_grad()
def eager_greedy(model, ids, steps):
    """The eager decode: DynamicCache, one token a step; (the greedy tokens, their logits)."""
    cache, logits = DynamicCache(config=model.config), []
    out = model(ids[None], past_key_values=cache).logits[:, -1]
    for _ in range(steps):
        logits.append(out)
        out = model(out.argmax(-1, keepdim=True), past_key_values=cache).logits[:, -1]
    return [int(x.argmax()) for x in logits], torch.cat(logits)


def compiled_greedy(dec, ids, steps):
    logits, out = [], dec.prefill(ids[None])
    for _ in range(steps):
        logits.append(out)
        out = dec.step(out.argmax(-1, keepdim=True))
    return [int(x.argmax()) for x in logits], torch.cat(logits)


@pytest.mark.parametrize("quant,wrapper", [(None, "python"), ("int8", "python"), ("int8", "cpp"),
                                            ("w8a8", "cpp"), ("w8a8x2", "python"),
                                            ("bf16", "python")])
def test_compiled_step_writes_the_eager_logits(quant, wrapper):
    """Through the Python wrapper and the C++ one (inductor's cpp_wrapper): the same kernels, the same logits."""
    model = tiny("llama", hidden_size=64, intermediate_size=128)  # int8's kernel wants K a multiple of 16
    ids, steps = random_ids(12, seed=3), 10
    with QuantizedWeights(model, quant) if quant else torch.no_grad():
        want_tokens, want = eager_greedy(model, ids, steps)
        dec = CompiledDecode(model, max_len=ids.numel() + steps, wrapper=wrapper)
        got_tokens, got = compiled_greedy(dec, ids, steps)
        assert got_tokens == want_tokens
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        # a second sequence through the same graph: the cache starts afresh, no stale positions read
        again_tokens, again = compiled_greedy(dec, ids, steps)
    assert again_tokens == want_tokens
    torch.testing.assert_close(again, got)


@pytest.mark.parametrize("specs", [("yarn:factor=2",), ("int8", "ntk:factor=2", "oracle:keep=0.5")])
def test_compiled_step_under_the_methods_it_takes_writes_their_eager_logits(specs):
    """The methods whose static_step() lets a compiled step run them (a RoPE scaling, a sparse MLP that masks,
    a weight scheme), composed: the compiled step writes the eager decode's logits under them."""
    assert all(methods.parse(s).static_step() is None for s in specs)
    model = tiny("llama", hidden_size=64, intermediate_size=128)
    ids, steps = random_ids(12, seed=5), 8
    with methods.apply(model, *specs):
        want_tokens, want = eager_greedy(model, ids, steps)
        got_tokens, got = compiled_greedy(CompiledDecode(model, max_len=ids.numel() + steps), ids, steps)
    assert got_tokens == want_tokens
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_step_that_breaks_the_graph_is_one_usage_error_not_a_partial_graph():
    """A sparse MLP that gathers (a kept set of changing size) breaks the graph: the step refuses it whole, so no
    frame of the model's shared code is compiled with its module guards skipped (and reused by another model)."""
    model = tiny("llama", hidden_size=64, intermediate_size=128)
    ids = random_ids(12, seed=6)
    with methods.apply(model, "oracle:keep=0.5,mode=gather"):
        dec = CompiledDecode(model, max_len=ids.numel() + 2)
        with pytest.raises(UsageError, match="does not compile into one graph"):
            dec.warm(ids[None])


@pytest.mark.parametrize("spec, runs", [("full", True), ("int4", True), ("pi:factor=4", True), ("teal", True),
                                        ("sinks:budget=8", True), ("h2o:budget=0.5", False), ("adakv:budget=8", False),
                                        ("dynamic-ntk", False), ("oracle:mode=gather", False),
                                        ("cats:mode=kernel", False)])
def test_what_a_compiled_step_refuses_is_one_line_before_any_model(spec, runs):
    m = methods.parse(spec)
    if runs:
        methods.base.refuse_uncompilable([m])
    else:
        with pytest.raises(UsageError, match=rf"^--compile .+: drop --method {re.escape(m.spec())} \(or --compile\)$"):
            methods.base.refuse_uncompilable([m])


@pytest.mark.parametrize("arch", ["gpt_neox", "gpt2", "opt"])
def test_compiled_step_writes_the_eager_logits_on_other_architectures(arch):
    """Rotary on part of each head (GPT-NeoX), learned absolute positions (GPT-2, and OPT's offset by 2): the
    static cache and the compiled step follow each model's own positions."""
    model = tiny(arch)
    ids, steps = random_ids(12, seed=4), 8
    want_tokens, want = eager_greedy(model, ids, steps)
    got_tokens, got = compiled_greedy(CompiledDecode(model, max_len=ids.numel() + steps), ids, steps)
    assert got_tokens == want_tokens
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_decoder_nll_is_the_streamed_nll():
    """evals.streaming.decoder_nll through CompiledDecode scores each token as stream_nll does one a step."""
    model, ids = tiny("llama"), random_ids(24, seed=5)
    want = stream_nll(model, ids, None, chunk=1)
    dec = CompiledDecode(model, max_len=ids.numel())
    dec.warm(ids[None])  # under grad mode: the decode below (no grad) must reuse this graph, not compile again
    graphs = counters["stats"]["unique_graphs"]
    got = decoder_nll(dec, ids)
    assert counters["stats"]["unique_graphs"] == graphs
    dec.greedy(ids[None, :8], 4)  # fresh token tensors, not slices of ids: other strides, the same graph
    assert counters["stats"]["unique_graphs"] == graphs
    np.testing.assert_allclose(got.nll, want.nll, rtol=1e-5, atol=1e-5)
    assert dec.kv_bytes() == 2 * 2 * ids.numel() * (2 * 8) * 4  # layers x (K, V) x T x (kv heads x head dim) x fp32
    assert [b for _, b in got.kv_bytes] == [dec.kv_bytes()] * (ids.numel() - 1)


def test_past_the_static_cache_is_one_usage_error():
    model = tiny("llama")
    dec = CompiledDecode(model, max_len=4)
    with pytest.raises(UsageError, match="larger max_len"):
        dec.prefill(random_ids(5)[None])


def test_a_model_changed_after_building_is_one_usage_error():
    """The step keeps no guards on the model's modules (checked before every call, they are a real share of
    a SmolLM2 step): entering a method after building, or leaving it, is caught at the next sequence's
    prefill, not decoded through a stale graph."""
    model, ids = tiny("llama", hidden_size=64, intermediate_size=128), random_ids(6)[None]
    dec = CompiledDecode(model, max_len=8)
    dec.prefill(ids)
    with QuantizedWeights(model, "int8"):
        with pytest.raises(UsageError, match="model changed"):
            dec.prefill(ids)
        inside = CompiledDecode(model, max_len=8)
        inside.prefill(ids)
    with pytest.raises(UsageError, match="model changed"):
        inside.prefill(ids)
    dec.prefill(ids)  # the model is as it was built again


def test_each_compiled_decode_keeps_its_own_graph():
    """Without guards on the model, one CompiledDecode's graph must not pass for another's: a graph bakes in the
    model's Python constants (here the norms' epsilon), so a second model that differs only there decodes its own
    logits through its own step, not the first model's."""
    ids, steps = random_ids(8, seed=6), 4
    compiled_greedy(CompiledDecode(tiny("llama", rms_norm_eps=1e-6), max_len=ids.numel() + steps), ids, steps)
    model = tiny("llama", rms_norm_eps=10.0)  # the same weights (the same seed); each norm's output far smaller
    _, want = eager_greedy(model, ids, steps)
    _, got = compiled_greedy(CompiledDecode(model, max_len=ids.numel() + steps), ids, steps)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_an_unknown_wrapper_is_one_usage_error():
    with pytest.raises(UsageError, match="python, cpp"):
        CompiledDecode(tiny("llama"), max_len=8, wrapper="c")


def test_no_compiler_is_one_usage_error(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match="C\\+\\+ compiler"):
        CompiledDecode(tiny("llama"), max_len=8)


def test_grouped_attention_is_sdpa_over_repeated_heads():
    """One query token, a masked static cache: the grouped matmul equals SDPA over each KV head repeated for
    its group (what transformers does with a mask), head by head."""
    from attnlab.models.compiled import grouped_attention

    g = torch.Generator().manual_seed(0)
    b, hq, hkv, s, d = 2, 6, 2, 10, 8
    q, k, v = (torch.randn(b, h, n, d, generator=g) for h, n in ((hq, 1), (hkv, s), (hkv, s)))
    mask = torch.rand(b, 1, 1, s, generator=g) > 0.3
    mask[..., 0] = True  # every row sees one slot at least
    got, _ = grouped_attention(None, q, k, v, mask, scaling=d ** -0.5)
    rep = hq // hkv
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), attn_mask=mask, scale=d ** -0.5)
    torch.testing.assert_close(got, want.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_the_model_outside_the_step_keeps_its_attention():
    model = tiny("llama")
    before = model.config._attn_implementation
    dec = CompiledDecode(model, max_len=8)
    dec.prefill(random_ids(3)[None])
    dec.step(torch.tensor([[1]]))
    assert model.config._attn_implementation == before
