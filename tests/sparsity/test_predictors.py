"""Deja Vu's predictors on tiny random models: they learn well above chance on held-out tokens, save and
reload exactly (in a run folder and beside the model's weights), refuse another model, and run as a
SparseMLP rule in mask and gather modes alike."""
import shutil

import pytest
import torch

from attnlab.core.errors import ConfigError, UsageError
from attnlab.evals.inputs import load_model
from attnlab.sparsity import predictor_store as store
from attnlab.sparsity.mlp import SparseMLP, SparsityRecord
from attnlab.sparsity.predicted import Predicted, PredictedHeads, saved_rule
from attnlab.sparsity.predictor_store import beside_folder, find_beside, load_predictors, save_beside, save_predictors
from attnlab.sparsity.predictors import SOURCES, new_predictors, score, train
from attnlab.sparsity.rules import topk_mask
from tiny_models import V, save_hf, tiny


def _ids(n, seed):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def trained():
    """A 3-layer tiny llama and its (own, lookahead) predictors trained on 4,096 random tokens."""
    torch.manual_seed(0)
    model = tiny("llama", num_hidden_layers=3)
    preds = [new_predictors(model, "tiny", 64, 0.5, s) for s in SOURCES]
    train(preds, model, _ids(4096, 0), epochs=3, window=128, batch=64, lr=1e-2)
    return model, preds


@pytest.mark.slow
def test_predictors_recall_well_above_chance_on_held_out_tokens(trained):
    model, preds = trained
    s = score(preds, model, _ids(1024, 1), window=128)  # tokens not trained on
    assert s["own"]["layers"] == [0, 1, 2] and s["lookahead"]["layers"] == [1, 2]
    for src in SOURCES:  # chance recall at keep 0.5 is 0.5 (a random set of the same size)
        assert min(s[src]["recall"]) > 0.75, (src, s[src]["recall"])
        assert all(m > 0.7 for m in s[src]["mass"])  # the predicted set carries most of |h|
        assert all(o >= m - 1e-9 for o, m in zip(s[src]["oracle_mass"], s[src]["mass"]))  # the oracle's is the most


@pytest.mark.slow
def test_save_load_round_trip_predicts_the_same(trained, tmp_path):
    model, preds = trained
    x = torch.randn(5, 32)
    for p in preds:
        q = load_predictors(save_predictors(p, tmp_path / p.meta.source), model)
        assert q.meta == p.meta
        layer = p.meta.layers[-1]
        assert torch.equal(q.logits(x, layer), p.logits(x, layer))


@pytest.mark.parametrize("other, what", [(dict(num_hidden_layers=4), "layer count 3 .saved. vs 4"),
                                         (dict(intermediate_size=48), "d_ff 64 .saved. vs 48"),
                                         (dict(), "model fingerprint")])
def test_loading_for_another_model_is_refused_in_one_line(tmp_path, other, what):
    model = tiny("llama", num_hidden_layers=3)
    save_predictors(new_predictors(model, "tiny", 8, 0.5, "own"), tmp_path / "own")
    another = tiny("llama", seed=1, **{"num_hidden_layers": 3, **other})
    with pytest.raises(UsageError, match=what) as e:
        load_predictors(tmp_path / "own", another)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="no predictors.json"):
        load_predictors(tmp_path / "none", model)


def test_predicted_rule_mask_and_gather_agree_and_keep_k(tiny_models):
    model = tiny_models["llama"]  # 2 layers, d_ff 64
    torch.manual_seed(0)
    own, look = (new_predictors(model, "tiny", 8, 0.25, s) for s in SOURCES)
    ids = _ids(24, 2).view(2, 12)
    outs = {}
    for mode in ("mask", "gather"):
        with SparseMLP(model, Predicted(0.25, own=own, lookahead=look), mode=mode):
            outs[mode] = model(ids).logits
    assert torch.allclose(outs["mask"], outs["gather"], atol=1e-5)
    with torch.no_grad():
        dense = model(ids).logits
    assert not torch.allclose(outs["mask"], dense, atol=1e-3)
    x = torch.randn(3, 32)
    m = Predicted(0.25, own=own).mask(x, 1)
    assert m.shape == (3, 64) and m.sum(-1).tolist() == [16] * 3
    assert torch.equal(m, topk_mask(own.logits(x, 1), 0.25))


def test_lookahead_reads_the_previous_layers_input(tiny_models):
    model = tiny_models["llama"]
    own, look = (new_predictors(model, "tiny", 8, 0.5, s) for s in SOURCES)
    rule = Predicted(0.5, own=own, lookahead=look)
    x0, x1 = torch.randn(4, 32), torch.randn(4, 32)
    rule.mask(x0, 0)
    assert torch.equal(rule.mask(x1, 1), topk_mask(look.logits(x0, 1), 0.5))  # layer 1 from x_0, not x_1
    with pytest.raises(UsageError, match="needs layer 0's input"):
        Predicted(0.5, lookahead=look, own=own).mask(x1, 1)  # layer 0 never ran
    with pytest.raises(UsageError, match="no predictor for layer 0"):
        SparseMLP(model, Predicted(0.5, lookahead=look))
    with pytest.raises(UsageError, match="predictor source .next. of .neurons."):
        new_predictors(model, "tiny", 8, 0.5, "next")


@pytest.mark.slow
def test_head_predictors_learn_and_run_as_predicted_heads():
    torch.manual_seed(0)
    model = tiny("llama", num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=4)
    preds = [new_predictors(model, "tiny", 32, 0.5, s, unit="heads") for s in SOURCES]
    train(preds, model, _ids(4096, 0), epochs=3, window=128, batch=64, lr=1e-2)
    s = score(preds, model, _ids(1024, 1), window=128)
    # a head's output norm also depends on the context it attends to, not only on x: lower than the neurons'
    # recall, yet on 1,024 held-out tokens chance (0.5, std ~0.01) is far below
    assert preds[0].meta.width == 8 and all(min(s[src]["recall"]) > 0.55 for src in SOURCES), s
    assert sum(s["own"]["recall"]) / 3 > 0.6
    ids = _ids(24, 2).view(2, 12)
    with torch.no_grad():
        dense = model(ids).logits
        record = SparsityRecord()
        with PredictedHeads(model, Predicted(0.5, *preds), record=record):
            sparse = model(ids).logits
        with PredictedHeads(model, Predicted(1.0, *preds)):
            assert torch.equal(model(ids).logits, dense)  # keep 1: every head
        assert torch.equal(model(ids).logits, dense)  # hooks removed on exit
    assert not torch.allclose(sparse, dense, atol=1e-3)
    assert record.layers("heads") == [0, 1, 2] and record.kept_fraction(what="heads") == 0.5
    with pytest.raises(UsageError, match="scores 8 heads, the layer has 64"):
        SparseMLP(model, Predicted(0.5, *preds))


def test_saved_beside_the_model_and_reloaded_from_there(tmp_path):
    folder = save_hf(tmp_path / "m")
    model, _ = load_model(str(folder))
    preds = [new_predictors(model, str(folder), 8, 0.5, s) for s in SOURCES]
    with torch.no_grad():
        preds[0].b2.add_(torch.arange(64.0))  # not the seeded initial state: a reload must read the file
    saved = [save_beside(p, str(folder)) for p in preds]
    assert saved == [folder / "predictors" / f"neurons-{s}-r8-keep0.5" for s in SOURCES]
    assert sorted(f.name for f in (folder / "predictors").iterdir()) == sorted(f.name for f in saved)  # nothing aside
    rule, read = saved_rule(model, str(folder), 0.5)  # lookahead (default) reads own too, for layer 0
    assert read == saved and rule.own.meta == preds[0].meta and rule.lookahead.meta == preds[1].meta
    x = torch.randn(3, 32)
    assert torch.equal(rule.own.logits(x, 0), preds[0].logits(x, 0))
    assert find_beside(str(folder), "neurons", "own", 0.5, r=8) == saved[0]
    with pytest.raises(ConfigError, match="no neurons predictors .own, keep 0.25. beside model .*train them first "
                                          "with `attnlab reproduce dejavu"):
        find_beside(str(folder), "neurons", "own", 0.25)
    save_predictors(new_predictors(model, str(folder), 16, 0.5, "own"),
                    beside_folder(str(folder), "neurons", "own", 16, 0.5))
    with pytest.raises(ConfigError, match="ranks 8, 16 are saved .*--predictor-rank"):
        find_beside(str(folder), "neurons", "own", 0.5)


def test_an_interrupted_save_leaves_the_previous_predictors_whole(tmp_path, monkeypatch):
    model = tiny("llama")
    p = new_predictors(model, "tiny", 8, 0.5, "own")
    save_predictors(p, tmp_path / "own")
    before = (tmp_path / "own" / store.WEIGHTS).read_bytes()

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "write_json", killed)
    with torch.no_grad():
        p.w1.mul_(2)
    with pytest.raises(KeyboardInterrupt):
        save_predictors(p, tmp_path / "own")
    assert (tmp_path / "own" / store.WEIGHTS).read_bytes() == before
    assert [f.name for f in tmp_path.iterdir()] == ["own"]  # no half-written folder beside it


def test_an_unwritable_model_folder_warns_in_one_line_and_saves_nothing(tmp_path, capsys):
    folder = save_hf(tmp_path / "m", tokenizer=False)
    (folder / "predictors").write_text("in the way")  # a file where the folder would go (root ignores modes)
    p = new_predictors(tiny("llama"), "tiny", 8, 0.5, "own")
    capsys.readouterr()  # what saving the model printed (transformers' progress bar)
    for name in (str(folder), "owner/hub-model"):  # a hub id has no folder to save beside
        assert save_beside(p, name) is None
        err = capsys.readouterr().err.strip()
        assert err.startswith("attnlab: warning: predictors not saved beside model") and len(err.splitlines()) == 1
        assert "the run folder keeps them" in err


@pytest.mark.parametrize("other, what", [(dict(num_hidden_layers=3), "layer count 2 .saved. vs 3"),
                                         (dict(seed=1), "model fingerprint")])
def test_a_saved_rule_refuses_another_models_predictors_and_a_wrong_keep(tmp_path, other, what):
    model = tiny("llama")
    for s in SOURCES:
        save_predictors(new_predictors(model, "tiny", 8, 0.5, s), tmp_path / s)
    another = tiny("llama", **other)
    with pytest.raises(UsageError, match=what) as e:
        saved_rule(another, "x", 0.5, "lookahead", str(tmp_path))
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="trained for keep 0.5, not 0.25"):
        saved_rule(model, "x", 0.25, "own", str(tmp_path))
    shutil.copytree(tmp_path / "lookahead", tmp_path / "mixed" / "own")
    with pytest.raises(UsageError, match="holds lookahead neurons predictors, not own"):
        saved_rule(model, "x", 0.5, "own", str(tmp_path / "mixed"))


def test_a_step_reads_one_predictor_per_layer(tiny_models):
    """The bandwidth ledger's predictor bytes: layer 0 from the own-input set, the rest from the lookahead set."""
    model = tiny_models["llama"]  # 2 layers, d 32, d_ff 64
    own, look = (new_predictors(model, "tiny", 8, 0.5, s) for s in SOURCES)
    per_layer = (32 * 8 + 8 * 64 + 64) * 4  # w1 (d, r), w2 (r, n), b2 (n,) in float32
    assert Predicted(0.5, own=own, lookahead=look).step_bytes(range(2)) == 2 * per_layer
    assert Predicted(0.5, own=own).step_bytes(range(2)) == 2 * per_layer
    assert Predicted(0.5, lookahead=look).step_bytes(range(2)) == per_layer  # layer 0 has none


def test_streams_ledger_counts_the_predictors_of_the_sparse_layers(tiny_models):
    from attnlab.sparsity.rules import make_rule

    model = tiny_models["llama"]
    own, look = (new_predictors(model, "tiny", 8, 0.5, s) for s in SOURCES)
    rule = Predicted(0.5, own=own, lookahead=look)
    with SparseMLP(model, rule, layers=[1]) as sparse:
        assert sparse.predictor_bytes() == rule.step_bytes([1]) > 0  # the sparse layer's predictor alone
    assert SparseMLP(model, make_rule("oracle", 0.5)).predictor_bytes() == 0  # a rule without predictors
