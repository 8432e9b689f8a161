"""`attnlab sparsity` on a tiny model folder and made-up texts: the run contract and bad input."""
import json
import shutil

import pytest
import torch

from attnlab.cli import main
from attnlab.evals.inputs import load_model
from attnlab.sparsity.predictor_store import save_beside
from attnlab.sparsity.predictors import SOURCES, new_predictors, train
from attnlab.sparsity.registry import RULES
from tiny_models import byte_tokenizer, save_hf, texts_and_cache, tiny


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, calibration = texts_and_cache(tmp_path, monkeypatch, repeat=6)
    return save_hf(tmp_path / "m"), text, calibration


def _argv(setup, out, *extra):
    model, text, calib = setup
    return ["sparsity", "--model", str(model), "--text", str(text), "--calibration", str(calib), "--tokens", "64",
            "--calibration-tokens", "64", "--window", "32", "--out", str(out), *extra]


@pytest.mark.slow
def test_sparsity_writes_the_run_contract_and_prints_its_findings(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--rule", "cats", "--keep", "0.5", "--heads-keep", "0.5")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["experiment"] == "sparsity" and config["rule"] == "cats" and config["heads_keep"] == 0.5
    m = json.loads((out / "metrics.json").read_text())
    assert m["claims"] == [] and m["command"].startswith("attnlab sparsity --model")
    assert m["sparse_ppl"] > 0 and m["dense_ppl"] > 0 and m["ppl_increase"] == pytest.approx(
        m["sparse_ppl"] / m["dense_ppl"] - 1)
    assert len(m["profile"]["kept"]) == len(m["cosine_per_layer"]) == len(m["overlap_per_layer"]) == 2
    assert 0 < m["profile"]["overall_kept"] < 1
    assert (out / "sparsity.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert report.startswith("# sparsity") and m["command"] in report and "dense: PPL" in report
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("dense: PPL") and lines[1].startswith("cats keep 0.5, heads 0.5")


@pytest.mark.slow
def test_oracle_at_keep_one_is_the_dense_model(setup, tmp_path):
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--rule", "oracle", "--keep", "1")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["sparse_ppl"] == m["dense_ppl"] and m["profile"]["overall_mass"] == 1.0


@pytest.mark.slow
def test_speed_times_dense_and_gather_decode_on_the_same_prompt(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--rule", "cats", "--keep", "0.5", "--speed", "--speed-steps", "3")) == 0
    d = json.loads((out / "metrics.json").read_text())["decode"]
    assert d["steps"] == 3 and d["batch"] == 1 and 0 <= d["top1_agreement"] <= 1
    assert all(d[k] > 0 for k in ("dense_ms_per_step", "sparse_ms_per_step", "dense_tokens_per_s",
                                  "sparse_tokens_per_s", "speedup"))
    assert d["speedup"] == pytest.approx(d["dense_ms_per_step"] / d["sparse_ms_per_step"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and lines[-1].startswith("decode (batch 1, 3 greedy steps")


@pytest.mark.parametrize("extra, message", [
    (["--keep", "0"], "keep fraction 0.0: give a number in (0, 1]"),
    (["--keep", "1.5"], "keep fraction 1.5"),
    (["--heads-keep", "2"], "keep fraction 2.0"),
    (["--rule", "orcale"], "did you mean 'oracle'"),
    (["--tokens", "5000"], "has only"),
    (["--rule", "cats", "--calibration-tokens", "5000"], "calibration text="),
    (["--rule", "teal", "--calibration", "TEXT"], "is the evaluation text"),
    (["--text", "no/such/file.txt"], "--text PATH"),
    (["--window", "1"], "--window 1"),
    (["--keep", "half"], "--keep half: expected a value of type float"),  # parsed as --set parses it, named as written
    (["--speed", "--speed-steps", "0"], "--speed-steps 0"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(setup, tmp_path, capsys, extra, message):
    extra = [str(setup[1]) if a == "TEXT" else a for a in extra]
    out = tmp_path / "o"
    assert main(_argv(setup, out, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".o")]


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["sparsity", "--help"])
    text = capsys.readouterr().out
    assert "attnlab sparsity --model smollm2 --rule oracle --keep 0.5" in text
    assert all(f"  {rule} " in text for rule in RULES.names())  # every registered rule, with what it keeps
    assert "--speed-steps" in text and "not a real saving" in text


def _trained_beside(folder, keep=0.5):
    """Own and lookahead predictors for the model in ``folder``, a few training steps, saved beside it."""
    model, _ = load_model(str(folder))
    preds = [new_predictors(model, str(folder), 8, keep, s) for s in SOURCES]
    train(preds, model, torch.randint(0, 256, (64,), generator=torch.Generator().manual_seed(0)), epochs=1,
          window=32, batch=32)
    return [save_beside(p, str(folder)) for p in preds]


@pytest.mark.slow
def test_predicted_rule_reads_the_predictors_beside_the_model_and_times_them(setup, tmp_path, capsys):
    saved = _trained_beside(setup[0])
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--rule", "predicted", "--keep", "0.5", "--speed", "--speed-steps", "2")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["rule"] == "predicted" and m["sparse_ppl"] > 0 and m["sparse_ppl"] != m["dense_ppl"]
    assert m["profile"]["overall_kept"] == 0.5  # the top half of d_ff by the predictor's logits, every token
    p = m["predictors"]
    assert p["source"] == "lookahead" and p["folders"] == [str(f) for f in saved] and p["r"] == 8
    assert 0 < p["flops_share_of_mlp"] < 1 and m["decode"]["steps"] == 2 and 0 <= m["decode"]["top1_agreement"] <= 1
    assert capsys.readouterr().out.splitlines()[1].startswith("predicted keep 0.5: PPL")
    own = tmp_path / "own"
    assert main(_argv(setup, own, "--rule", "predicted", "--predictor-source", "own")) == 0
    assert json.loads((own / "metrics.json").read_text())["predictors"]["folders"] == [str(saved[0])]


@pytest.mark.parametrize("extra, message", [
    (["--rule", "predicted"], "no neurons predictors (own, keep 0.5) beside model"),
    (["--rule", "predicted", "--predictors", "NONE"], "no predictors.json here; train predictors first"),
    (["--rule", "predicted", "--predictor-source", "next"], "invalid choice: 'next'"),
    (["--rule", "predicted", "--predictor-rank", "0"], "--predictor-rank 0"),
    (["--rule", "oracle", "--predictors", "NONE"], "--predictors and --predictor-rank are for --rule predicted"),
    (["--rule", "predicte"], "did you mean 'predicted'"),
])
def test_predicted_rule_without_predictors_is_one_line_exit_2(setup, tmp_path, capsys, extra, message):
    extra = [str(tmp_path / "none") if a == "NONE" else a for a in extra]
    out = tmp_path / "o"
    assert main(_argv(setup, out, *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()
    if extra == ["--rule", "predicted"]:
        assert "train them first with `attnlab reproduce dejavu" in err


@pytest.mark.slow
@pytest.mark.parametrize("other, message", [(dict(num_hidden_layers=3), "layer count 2 (saved) vs 3 (this model)"),
                                            (dict(seed=1), "model fingerprint")])
def test_another_models_predictors_are_refused_in_one_line(setup, tmp_path, capsys, other, message):
    model, text, calib = setup
    saved = _trained_beside(model)
    run = tmp_path / "dejavu-predictors"  # a dejavu run's layout: own/ and lookahead/
    for f in saved:
        shutil.copytree(f, run / f.name.split("-")[1])
    another = tmp_path / "another"
    tiny("llama", **{"vocab_size": 300, "max_position_embeddings": 64, "tie_word_embeddings": True,
                     "bos_token_id": 256, "eos_token_id": 256, **other}).save_pretrained(another)
    byte_tokenizer().save_pretrained(another)
    capsys.readouterr()  # what saving the model printed (transformers' progress bar)
    out = tmp_path / "o"
    assert main(_argv((another, text, calib), out, "--rule", "predicted", "--predictors", str(run))) == 2
    err = capsys.readouterr().err.strip()
    assert "trained for another model" in err and message in err and len(err.splitlines()) == 1
    assert main(_argv(setup, out, "--rule", "predicted", "--predictors", str(run), "--keep", "0.25")) == 2
    assert "trained for keep 0.5, not 0.25" in capsys.readouterr().err
