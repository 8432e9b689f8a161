"""SparseMLP on tiny random models: exact at keep 1, gather equals mask, each rule's mask recomputed by hand
from the layer's weights, the model restored on exit, composition with the KV cache and RoPE scalings."""
import contextlib
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import DynamicCache

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.mlp import MODES, SparseMLP, SparsityRecord
from attnlab.sparsity.predicted import Predicted
from attnlab.sparsity.predictors import SOURCES, new_predictors
from attnlab.sparsity.registry import RULES
from attnlab.sparsity.rules import CATS, TEAL, Oracle, Static, magnitude_threshold, topk_mask
from tiny_models import ARCHS, ROPE_ARCHS, V, tiny


def _ids(b=2, t=12, seed=0) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def _state(model) -> tuple:
    """Every forward (pre-)hook and every instance-level forward on the model (transformers may leave
    its own output-capturing hooks on a shared model, so compare before with after)."""
    hooks = frozenset((name, kind, key) for name, m in model.named_modules()
                      for kind in ("_forward_hooks", "_forward_pre_hooks") for key in getattr(m, kind))
    return hooks, frozenset(name for name, m in model.named_modules() if "forward" in m.__dict__)


def _by_hand(model, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer i's (act(gate(x)), h) from its weights: x (..., d) -> (..., d_ff) each; a plain MLP's gate is h."""
    m = arch.mlp(model, i)

    def proj(p):
        return x @ arch.weight(p).T + (p.bias if p.bias is not None else 0)

    if m.gate_proj is None:
        h = m.act_fn(proj(m.in_proj))
        return h, h
    a = m.act_fn(proj(m.gate_proj))
    return a, a * proj(m.in_proj)


def _dense_acts(model, ids):
    """Per layer the dense MLP input x and (act(gate(x)), h), (B, T, ·) each."""
    n = len(arch.layers(model))
    with torch.no_grad(), Trace(model, "blocks.*.mlp.in") as tr:
        model(ids)
    xs = [tr[f"blocks.{i}.mlp.in"] for i in range(n)]
    return xs, [_by_hand(model, i, x) for i, x in enumerate(xs)]


def _rules(model, ids, keep: float) -> dict:
    """Each registered rule, built by hand: calibrated on ``ids`` to keep about ``keep`` of its units (keep 1:
    everything); the predicted rule from untrained (seeded) predictors."""
    xs, acts = _dense_acts(model, ids)
    n_ff = arch.dims(model).d_ff
    layers = range(len(xs))
    return {
        "oracle": Oracle(keep),
        "cats": CATS({i: magnitude_threshold(acts[i][0].flatten(0, -2), keep) for i in layers}),
        "teal": TEAL({i: magnitude_threshold(xs[i].flatten(0, -2), keep) for i in layers},
                     {i: magnitude_threshold(acts[i][1].flatten(0, -2), keep) for i in layers}),
        "static": Static({i: torch.randperm(n_ff, generator=torch.Generator().manual_seed(i))[:round(keep * n_ff)]
                          for i in layers}),
        "predicted": Predicted(keep, *(new_predictors(model, "tiny", 8, keep, s) for s in SOURCES)),
    }


def test_every_registered_rule_is_built_here(tiny_models):
    """Adding a rule to the registry means adding it to ``_rules``: the tests below then cover it."""
    assert list(_rules(tiny_models["llama"], _ids(), 0.5)) == RULES.names()


@pytest.mark.parametrize("name", ARCHS)
def test_keeping_everything_is_bit_identical_to_the_dense_model_for_every_rule(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    with torch.no_grad():
        dense = model(ids).logits
        for rule_name, rule in _rules(model, ids, 1.0).items():
            for mode in MODES:
                with SparseMLP(model, rule, mode=mode):
                    out = model(_ids()).logits
                if mode == "mask":
                    assert torch.equal(out, dense), rule_name
                else:
                    torch.testing.assert_close(out, dense, rtol=1e-5, atol=1e-5)


def _decode(model, ids, steps: int, context) -> list[torch.Tensor]:
    """Prefill ``ids`` (B, T), then ``steps`` one-token steps through a DynamicCache: each forward's logits."""
    nxt = _ids(ids.shape[0], steps, seed=1)
    outs = []
    with torch.no_grad(), context():
        cache = DynamicCache(config=model.config)
        outs.append(model(ids, past_key_values=cache, use_cache=True).logits)
        for s in range(steps):
            outs.append(model(nxt[:, s:s + 1], past_key_values=cache, use_cache=True).logits)
    return outs


@pytest.fixture(params=["rows", "dense"])
def gather_path(request, monkeypatch):
    """Gather mode both ways: always the kept union's rows, or always the dense fallback (a large union)."""
    from attnlab.sparsity import mlp

    monkeypatch.setattr(mlp, "DENSE_ABOVE", 1.0 if request.param == "rows" else 0.0)
    return request.param


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("mode", ["gather", "cached"])
def test_gather_equals_mask_for_the_oracle_in_prefill_and_decode(tiny_models, name, batch, mode, gather_path):
    model, ids = tiny_models[name], _ids(batch, 9)
    masked = _decode(model, ids, 4, lambda: SparseMLP(model, Oracle(0.25), mode="mask"))
    gathered = _decode(model, ids, 4, lambda: SparseMLP(model, Oracle(0.25), mode=mode))
    dense = _decode(model, ids, 4, lambda: torch.no_grad())
    for m, g, d in zip(masked, gathered, dense):
        torch.testing.assert_close(g, m, rtol=1e-5, atol=1e-5)
        assert (m - d).abs().max() > 1e-3  # the mask did something


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("rule_name", RULES.names())
def test_gather_equals_mask_for_every_rule(tiny_models, name, rule_name, gather_path):
    model, ids = tiny_models[name], _ids(3, 10)
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)[rule_name]  # calibrated on another text
    outs = {}
    for mode in MODES:
        rec = SparsityRecord()
        with torch.no_grad(), SparseMLP(model, rule, mode=mode, record=rec):
            outs[mode] = model(ids).logits
        outs[mode + " kept"] = rec.kept_fraction(what="x" if rule.needs == "x" else "h")  # TEAL: its channels
    torch.testing.assert_close(outs["gather"], outs["mask"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs["cached"], outs["mask"], rtol=1e-5, atol=1e-5)
    assert outs["gather kept"] == outs["cached kept"] == outs["mask kept"] < 1


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("rule_name", RULES.names())
def test_batch_one_decode_without_a_record_gathers_what_the_mask_keeps_for_every_rule(tiny_models, name, rule_name,
                                                                                     gather_path):
    # no record at batch 1: the path decode takes (a rule that names its indices -- predicted -- builds no mask)
    model, ids = tiny_models[name], _ids(1, 6)
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)[rule_name]
    masked = _decode(model, ids, 4, lambda: SparseMLP(model, rule, mode="mask"))
    gathered = _decode(model, ids, 4, lambda: SparseMLP(model, rule, mode="gather"))
    for m, g in zip(masked, gathered):
        torch.testing.assert_close(g, m, rtol=1e-5, atol=1e-5)


def test_predicted_indices_are_the_units_its_mask_keeps(tiny_models):
    model = tiny_models["llama"]
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)["predicted"]
    x0, x1 = torch.randn(2, 1, arch.dims(model).d_model, generator=torch.Generator().manual_seed(4))
    for layer, x in ((0, x0), (1, x1)):
        seen = lambda: rule.mask(x0, 0) if layer else None  # noqa: E731  layer 1 reads layer 0's input (lookahead)
        seen()
        mask = rule.mask(x, layer)
        seen()
        idx = rule.indices(x, layer)
        assert torch.equal(idx.sort().values, mask[0].nonzero().squeeze(1))


class _Projected:
    """A rule of the kind a Deja Vu predictor is: a neuron mask decided from x alone (here a fixed random
    projection's top quarter), no ``check`` method."""

    name, needs = "projected", "input"

    def __init__(self, d: int, n: int):
        self.proj = torch.randn(d, n, generator=torch.Generator().manual_seed(3))  # (d, d_ff)

    def mask(self, x, layer):
        return topk_mask(x @ self.proj, 0.25)  # (..., d_ff)


@pytest.mark.parametrize("name", ARCHS)
def test_a_rule_deciding_from_the_mlp_input_keeps_its_set_in_both_modes(tiny_models, name):
    model, ids = tiny_models[name], _ids(1, 6)
    d = arch.dims(model)
    rule = _Projected(d.d_model, d.d_ff)
    masked = _decode(model, ids, 3, lambda: SparseMLP(model, rule))
    for mode in ("gather", "cached"):
        gathered = _decode(model, ids, 3, lambda: SparseMLP(model, rule, mode=mode))
        for m, g in zip(masked, gathered):
            torch.testing.assert_close(g, m, rtol=1e-5, atol=1e-5)
    tr = _traced(model, rule, ids)
    for i in range(2):
        x = tr[f"blocks.{i}.mlp.in"]
        _, h = _by_hand(model, i, x)
        torch.testing.assert_close(tr[f"blocks.{i}.mlp.post"], h * rule.mask(x, i), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["gather", "cached"])
def test_gather_with_a_static_set_never_runs_the_dense_projections(tiny_models, mode):
    model, calls = tiny_models["llama"], []
    m, rule = arch.mlp(model, 0), _rules(model, _ids(), 0.25)["static"]
    handles = [p.register_forward_hook(lambda *a: calls.append(1)) for p in (m.gate_proj, m.in_proj, m.out_proj)]
    try:
        with torch.no_grad(), SparseMLP(model, rule, layers=[0], mode=mode):
            model(_ids())
    finally:
        for h in handles:
            h.remove()
    assert calls == []


def _traced(model, rule, ids, names=("blocks.*.mlp.in", "blocks.*.mlp.post")):
    with torch.no_grad(), SparseMLP(model, rule), Trace(model, list(names)) as tr:
        model(ids)
    return tr


@pytest.mark.parametrize("name", ARCHS)
def test_the_oracle_keeps_exactly_the_top_k_of_h_per_token(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    tr = _traced(model, Oracle(0.25), ids)
    for i in range(len(arch.layers(model))):
        _, h = _by_hand(model, i, tr[f"blocks.{i}.mlp.in"])  # (B, T, d_ff)
        post = tr[f"blocks.{i}.mlp.post"]
        k = h.shape[-1] // 4
        top = h.abs().topk(k, dim=-1).indices
        expected = torch.zeros_like(h, dtype=torch.bool).scatter_(-1, top, True)
        assert torch.equal(post != 0, expected)
        torch.testing.assert_close(post, h * expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["llama", "gpt_neox"])
def test_cats_keeps_the_neurons_whose_gate_activation_reaches_the_threshold(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)["cats"]
    tr = _traced(model, rule, ids)
    for i in range(2):
        a, h = _by_hand(model, i, tr[f"blocks.{i}.mlp.in"])
        kept = a.abs() >= rule.thresholds[i]
        assert 0 < kept.float().mean() < 1
        torch.testing.assert_close(tr[f"blocks.{i}.mlp.post"], h * kept, rtol=1e-5, atol=1e-6)


def test_teal_zeroes_the_input_channels_below_its_threshold(tiny_models):
    model, ids = tiny_models["llama"], _ids()
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)["teal"]
    dense_x = {}
    norms = [arch.norms(model, i).mlp for i in range(2)]  # the MLP's input before TEAL sees it
    handles = [n.register_forward_hook(lambda mod, a, out, i=i: dense_x.__setitem__(i, out))
               for i, n in enumerate(norms)]
    try:
        tr = _traced(model, rule, ids)
    finally:
        for h in handles:
            h.remove()
    for i in range(2):
        x = dense_x[i]
        x_kept = x.abs() >= rule.thresholds_x[i]
        assert 0 < x_kept.float().mean() < 1
        assert torch.equal(tr[f"blocks.{i}.mlp.in"], x * x_kept)  # what enters gate/up
        _, h = _by_hand(model, i, x * x_kept)
        torch.testing.assert_close(tr[f"blocks.{i}.mlp.post"], h * (h.abs() >= rule.thresholds_h[i]), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("name", ARCHS)
def test_static_keeps_the_same_neurons_for_every_token(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    rule = _rules(model, ids, 0.25)["static"]
    tr = _traced(model, rule, ids)
    for i in range(2):
        _, h = _by_hand(model, i, tr[f"blocks.{i}.mlp.in"])
        keep = torch.zeros(h.shape[-1], dtype=torch.bool).index_fill_(0, rule.sets[i], True)
        torch.testing.assert_close(tr[f"blocks.{i}.mlp.post"], h * keep, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("mode", MODES)
def test_the_model_is_restored_on_exit_also_when_the_block_raises(tiny_models, name, mode):
    model, ids = tiny_models[name], _ids()
    before = _state(model)
    with torch.no_grad():
        dense = model(ids).logits
        with SparseMLP(model, Oracle(0.5), mode=mode):
            assert _state(model) != before  # the forwards are replaced inside
        assert _state(model) == before
        with pytest.raises(RuntimeError, match="inside"), SparseMLP(model, Oracle(0.5), mode=mode):
            model(ids)
            raise RuntimeError("inside")
        assert _state(model) == before and torch.equal(model(ids).logits, dense)


def test_a_second_sparse_mlp_on_the_same_layer_is_refused_and_leaves_the_first(tiny_models):
    model = tiny_models["llama"]
    before = _state(model)
    with SparseMLP(model, Oracle(0.5), layers=[1]):
        inside = _state(model)
        with pytest.raises(UsageError, match=r"layer 1's MLP already has its forward replaced"):
            with SparseMLP(model, Oracle(0.25)):  # layer 0 replaced first, then refused at 1: undone
                pass
        assert _state(model) == inside
    assert _state(model) == before


@pytest.mark.parametrize("name", ARCHS)
def test_composes_with_the_evicting_kv_cache(tiny_models, name):
    from attnlab.kv.cache import PolicyCache
    from attnlab.kv.policies import make_policy

    model, ids = tiny_models[name], _ids(1, 10)
    with torch.no_grad():
        for keep in (1.0, 0.5):
            streamed = []
            with PolicyCache(model, make_policy("full")) as cache, SparseMLP(model, Oracle(keep)):
                for t in range(ids.shape[1]):
                    streamed.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits)
            with SparseMLP(model, Oracle(keep)) if keep < 1 else torch.no_grad():
                plain = model(ids).logits
            torch.testing.assert_close(torch.cat(streamed, 1), plain, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ROPE_ARCHS)
def test_nests_with_a_rope_scaling_and_the_kv_cache(tiny_models, name):
    from attnlab.kv.cache import PolicyCache
    from attnlab.kv.policies import make_policy
    from attnlab.rope.apply import ScaledRope
    from attnlab.rope.scalings import make_scaling

    model, ids = tiny_models[name], _ids(1, 10)
    before = _state(model)
    with torch.no_grad():
        plain = model(ids).logits
        streamed = []
        with (ScaledRope(model, make_scaling("pi", 1.0)), PolicyCache(model, make_policy("full")) as cache,
              SparseMLP(model, Oracle(1.0), mode="gather")):
            for t in range(ids.shape[1]):
                streamed.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits)
    torch.testing.assert_close(torch.cat(streamed, 1), plain, rtol=1e-4, atol=1e-5)
    assert _state(model) == before


class _Foreign(nn.Module):
    config = SimpleNamespace(model_type="mamba")


def _no_gate_llama():
    model = tiny("llama")
    model.model.layers[1].mlp = nn.Linear(32, 32)
    return model


@pytest.mark.parametrize("build, message", [
    (lambda m: SparseMLP(m, Oracle(0.5), layers=[2]), r"layer index 2 is out of range: this model has 2 layers"),
    (lambda m: SparseMLP(m, Oracle(0.5), layers=[-1]), r"layer index -1 is out of range"),
    (lambda m: SparseMLP(m, Oracle(0.5), mode="dense"), r"unknown sparse MLP mode 'dense'"),
    (lambda m: SparseMLP(m, CATS({0: 0.1})), r"CATS has no threshold for layer 1"),
    (lambda m: SparseMLP(m, object()), r"object is not a sparsity rule"),
    (lambda m: SparseMLP(_Foreign(), Oracle(0.5)), r"config.model_type 'mamba'\) is not in attnlab's architecture"),
    (lambda m: SparseMLP(_no_gate_llama(), Oracle(0.5)),
     r"layer 1 of this llama model lacks the MLP modules SparseMLP looks for \(mlp.gate_proj, mlp.up_proj, "
     r"mlp.down_proj, mlp.act_fn"),
])
def test_bad_input_is_one_line_naming_the_fix(tiny_models, build, message):
    with pytest.raises(UsageError, match=message) as e:
        build(tiny_models["llama"])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ARCHS)
def test_the_record_keeps_the_oracle_fraction_and_a_share_of_the_h_mass(tiny_models, name):
    model, ids = tiny_models[name], _ids()
    for keep in (0.25, 0.5, 1.0):
        rec = SparsityRecord()
        with torch.no_grad(), SparseMLP(model, Oracle(keep), record=rec):
            model(ids)
        assert rec.layers() == [0, 1]
        assert rec.kept_fraction() == keep and all(rec.kept_fraction(i) == keep for i in (0, 1))
        masses = [rec.mass(i) for i in (0, 1)]
        assert all(keep <= m <= 1 for m in masses)  # the top k carry at least their share of the mass
        assert all(m == 1 for m in masses) if keep == 1 else all(m < 1 for m in masses)
    assert set(rec.as_dict()["h"]) == {"0", "1"}


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("batch", [1, 3])
def test_cached_equals_mask_over_a_decode_whose_sets_change_size_and_content(tiny_models, name, batch):
    model, ids = tiny_models[name], _ids(batch, 7)
    rule = _rules(model, _ids(4, 16, seed=2), 0.3)["cats"]  # thresholds: each token keeps its own count
    masked = _decode(model, ids, 6, lambda: SparseMLP(model, rule))
    caches = []

    @contextlib.contextmanager
    def cached():
        with SparseMLP(model, rule, mode="cached"):
            caches.extend(m.forward.__self__.cache for m in _replaced_modules(model))
            yield

    for m, c in zip(masked, _decode(model, ids, 6, cached)):
        torch.testing.assert_close(c, m, rtol=1e-5, atol=1e-5)
    assert all(c.steps == 7 and 0 < c.reuse() < 1 for c in caches)  # each step reused and replaced some rows


def _replaced_modules(model):
    """The MLP modules a SparseMLP will replace the forward of (the inline MLP's fc1 for OPT)."""
    return [arch.mlp(model, i).in_proj if arch.arch_of(model).flat_mlp else arch.mlp(model, i).module
            for i in range(len(arch.layers(model)))]


def test_a_gathering_mlp_reads_its_gate_up_and_down_projections_in_part():
    """The bandwidth ledger's shares: each layer's three MLP projections (arch.mlp_projections)."""
    model = tiny("llama")  # 2 layers, gated MLP
    mlps = [model.model.layers[i].mlp for i in range(2)]
    assert arch.mlp_projections(model) == [p for m in mlps for p in (m.gate_proj, m.up_proj, m.down_proj)]
    gpt2 = tiny("gpt2")  # no gate: in and out alone
    assert arch.mlp_projections(gpt2) == [p for b in gpt2.transformer.h for p in (b.mlp.c_fc, b.mlp.c_proj)]
