"""`attnlab sparsity` on a tiny model folder and made-up texts: the run contract and bad input."""
import json

import pytest

from attnlab.cli import main
from tiny_models import save_hf, texts_and_cache

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
    assert d["steps"] == 3 and d["dense_tokens"] == d["sparse_tokens"] == 3 and d["batch"] == 1
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
    (["--keep", "half"], "invalid float value"),
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
    assert all(rule in text for rule in ("oracle", "cats", "teal", "static"))
    assert "--speed-steps" in text and "not a real saving" in text
