"""The dejavu experiment end to end on a tiny model folder and made-up texts (the real run uses SmolLM2,
WikiText-2, KJV and War and Peace, which CI does not have)."""
import json
from types import SimpleNamespace

import pytest

from attnlab.cli import main
from attnlab.core.errors import ConfigError, MissingResource, UsageError
from attnlab.sparsity.exp_dejavu import DejaVuConfig, run_dejavu
from tiny_models import byte_tokenizer, texts_and_cache, tiny


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, train = texts_and_cache(tmp_path, monkeypatch)
    folder = tmp_path / "m"  # 4 layers: the lookahead claims compare middle and edge layers
    tiny("llama", vocab_size=300, num_hidden_layers=4, max_position_embeddings=64, tie_word_embeddings=True,
         bos_token_id=256, eos_token_id=256).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder, text, train


def _reproduce(out, *sets):
    sets = ["tokens=96", "train_tokens=128", "window=32", "rank=16", "epochs=2", "batch=32", "speed_steps=2", *sets]
    return main(["reproduce", "dejavu", "--out", str(out)] + [a for s in sets for a in ("--set", s)])


@pytest.mark.slow
def test_experiment_runs_end_to_end_states_its_claims_and_reloads(setup, tmp_path):
    model, text, train = setup
    out = tmp_path / "run"
    assert _reproduce(out, f"model={model}", f"text={text}", f"train_texts={train}", "heads_keep=0.5") == 0
    m = json.loads((out / "metrics.json").read_text())
    status = [c["status"] for c in m["claims"]]
    assert all(s in ("holds", "fails") for s in status[:6]) and status[6:] == ["finding"] * 5  # + heads
    explained = [c["status"] == "holds" or bool(c.get("note")) for c in m["claims"][:6]]
    assert explained[0] and explained[2:] == [True] * 4  # a failed claim says why (the gap claim: no note)
    speed, d = m["claims"][5], m["decode"]  # decode with the lookahead predictor choosing vs dense, batch 1
    assert "faster with the lookahead predictor choosing" in speed["claim"] and speed["expected"] == 1.0
    assert speed["measured"] == d["speedup"] == pytest.approx(d["dense_ms_per_step"] / d["sparse_ms_per_step"])
    assert d["steps"] == 2 and d["batch"] == 1 and d["prompt_tokens"] == 32
    assert "lookahead predictor" in m["claims"][0]["claim"] and "middle layers (1..2" in m["claims"][0]["claim"]
    assert set(m["ppl"]) == {"dense", "oracle", "own", "lookahead"}
    assert m["scores"]["own"]["layers"] == [0, 1, 2, 3] and m["scores"]["lookahead"]["layers"] == [1, 2, 3]
    assert 0 < m["cost"]["flops_share_of_mlp"] < 1 and len(m["train_bce"]) == 2
    assert (out / "dejavu.png").stat().st_size > 0 and "## Claims" in (out / "report.md").read_text()
    assert set(m["heads_ppl"]) == {"dense", "oracle", "own", "lookahead"}
    assert "head predictors" in m["claims"][-1]["claim"]
    assert m["heads_scores"]["lookahead"]["layers"] == [1, 2, 3]
    saved = {p.name for p in (out / "predictors").iterdir()}
    assert saved == {"own", "lookahead", "heads-own", "heads-lookahead"}
    again = tmp_path / "again"  # reloads the saved predictors: the same scores, nothing trained
    assert _reproduce(again, f"model={model}", f"text={text}", f"predictors={out / 'predictors'}",
                      "heads_keep=0.5") == 0
    m2 = json.loads((again / "metrics.json").read_text())
    assert m2["scores"] == m["scores"] and m2["ppl"] == m["ppl"] and m2["train_bce"] is None
    assert m2["heads_scores"] == m["heads_scores"] and m2["heads_ppl"] == m["heads_ppl"]
    beside = {p.name for p in (model / "predictors").iterdir()}  # also saved beside the model's weights
    assert beside == {f"{u}-{s}-r16-keep0.5" for u in ("neurons", "heads") for s in ("own", "lookahead")}
    third = tmp_path / "beside"  # reloads them from there: the same scores again
    assert _reproduce(third, f"model={model}", f"text={text}", "predictors=beside", "heads_keep=0.5") == 0
    m3 = json.loads((third / "metrics.json").read_text())
    assert m3["scores"] == m["scores"] and m3["heads_ppl"] == m["heads_ppl"] and m3["train_bce"] is None
    assert main(["reproduce", "dejavu", "--out", str(tmp_path / "r32"), "--set", f"model={model}", "--set",
                 f"text={text}", "--set", "predictors=beside", "--set", "rank=32"]) == 2  # none at this rank


@pytest.mark.slow
def test_quick_mode_leaves_the_claims_unresolved_and_decides_chance(setup, tmp_path):
    """judge=False: the six claims about trained predictors are unresolved with the reason; the quick still
    decides one claim, that x predicts the set better than chance (interval over the layers)."""
    model, text, train = setup
    out = tmp_path / "run"
    assert _reproduce(out, f"model={model}", f"text={text}", f"train_texts={train}", "judge=false",
                      "beside=false") == 0
    m = json.loads((out / "metrics.json").read_text())
    status = [c["status"] for c in m["claims"]]
    assert status[:6] == ["unresolved"] * 6 and all("cannot decide" in c["note"] for c in m["claims"][:6])
    chance = m["claims"][6]
    assert chance["status"] in ("holds", "fails") and chance["claim"].startswith("x predicts the set at all")
    assert chance["n"] == 4 and chance["interval"][0] <= chance["measured"] <= chance["interval"][1]
    assert status[7:] == ["finding"] * 4 and m["decode"]["steps"] == 2  # the speed measured too
    assert (out / "predictors" / "own").is_dir() and not (model / "predictors").exists()  # the run's copy only


@pytest.mark.parametrize("fields, message", [
    ({"keep": 1.5}, "keep fraction 1.5"), ({"keep": 1.0}, "nothing to predict"), ({"window": 1}, "window=1"),
    ({"train_tokens": 3}, "train_tokens=3"), ({"lr": -1.0}, "lr=-1.0: give a positive learning rate"),
    ({"speed_steps": 0}, "speed_steps=0")])
def test_config_refuses_impossible_runs(fields, message):
    with pytest.raises(UsageError, match=message):
        DejaVuConfig(**fields)


def test_training_on_the_evaluation_text_is_refused(setup):
    model, text, _ = setup
    with pytest.raises(ConfigError, match="is the evaluation text"):
        run_dejavu(DejaVuConfig(model=str(model), text=str(text), train_texts=(str(text),)),
                   SimpleNamespace(device="cpu"))


def test_uncached_model_is_a_missing_resource(setup, tmp_path):
    _, text, train = setup
    with pytest.raises(MissingResource):
        run_dejavu(DejaVuConfig(text=str(text), train_texts=(str(train),)), SimpleNamespace(device="cpu"))


def test_predictors_beside_an_untrained_model_is_one_line_exit_2(setup, tmp_path, capsys):
    model, text, _ = setup
    assert _reproduce(tmp_path / "run", f"model={model}", f"text={text}", "predictors=beside") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no neurons predictors (own, keep 0.5, r 16) beside model" in err
    assert "train them first with `attnlab reproduce dejavu" in err and "--set rank=16" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_under_a_weight_scheme_it_measures_that_model_and_keeps_its_predictors_out_of_the_models_folder(
        setup, tmp_path):
    """``--method int8``: the predictors are trained and scored on the int8 model (its dense PPL is the int8
    model's, by hand), and not saved beside the float weights, whose own predictors they would replace."""
    from attnlab.methods import apply
    from attnlab.sparsity.measure import load_texts, perplexity

    model, text, train = setup
    out = tmp_path / "q"
    assert _reproduce(out, f"model={model}", f"text={text}", f"train_texts={train}", "methods=int8") == 0
    m = json.loads((out / "metrics.json").read_text())
    hf, ids, _ = load_texts(str(model), str(text), 96)
    with apply(hf, "int8"):
        by_hand = perplexity(hf, ids, 32)
    assert m["ppl"]["dense"] == by_hand != perplexity(hf, ids, 32)  # the int8 model's, not the float one's
    assert json.loads((out / "config.json").read_text())["methods"] == ["int8"]
    assert (out / "predictors" / "own").is_dir() and not (model / "predictors").exists()
