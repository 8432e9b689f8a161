"""The contextual-sparsity experiment end to end on a tiny model folder and made-up texts (the real run
uses SmolLM2 and WikiText-2, which CI does not have)."""
import json
from types import SimpleNamespace

import pytest

from attnlab.cli import main
from attnlab.core.errors import ConfigError, MissingResource, UsageError
from attnlab.sparsity.experiments import SWEPT, SparsityConfig, run_contextual_sparsity
from attnlab.sparsity.registry import rule_names
from tiny_models import save_hf, texts_and_cache


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, calibration = texts_and_cache(tmp_path, monkeypatch, repeat=8)
    return save_hf(tmp_path / "m"), text, calibration


def _reproduce(out, model, text, calib, *sets):
    sets = [f"model={model}", f"text={text}", f"calibration={calib}", "tokens=96", "calibration_tokens=64",
            "window=32", "keeps=1,0.5", "heads_keeps=1,0.5", *sets]
    return main(["reproduce", "contextual-sparsity", "--out", str(out)] + [a for s in sets for a in ("--set", s)])


@pytest.mark.slow
def test_experiment_runs_end_to_end_and_states_its_claims(setup, tmp_path):
    model, text, calib = setup
    out = tmp_path / "run"
    assert _reproduce(out, model, text, calib) == 0
    m = json.loads((out / "metrics.json").read_text())
    claims = m["claims"]
    assert [c["status"] in ("holds", "fails") for c in claims] == [True] * 5 + [False] * 3  # 5 claims, 3 findings
    assert all({"claim", "measured", "expected", "tolerance", "status"} <= set(c) for c in claims)
    assert "oracle top-k at 50%" in claims[0]["claim"] and "static set" in claims[1]["claim"]
    assert list(m["ppl"]) == rule_names(SWEPT)  # every registered rule that needs no trained predictors
    d, half = m["dense_ppl"], {r: c["0.5"] for r, c in m["ppl"].items()}  # each claim measures its own rule
    assert [c["measured"] for c in claims[:4]] == pytest.approx([
        half["oracle"] / d - 1, (half["static"] - d) / max(half["oracle"] - d, 1e-3 * d),
        half["cats"] / d - 1, half["teal"] / d - 1])
    assert "CATS" in claims[2]["claim"] and "TEAL" in claims[3]["claim"]
    assert all(list(c) == ["1", "0.5"] and c["1"] == m["dense_ppl"] for c in m["ppl"].values())
    assert m["kept"]["oracle"]["0.5"] == 0.5 and 0.0 < m["kept"]["cats"]["0.5"] < 1.0
    assert len(m["cosine_per_layer"]) == len(m["overlap_per_layer"]) == 2
    assert list(m["profile"]) == rule_names(SWEPT) and "x_kept" in m["profile"]["teal"]
    assert list(m["heads_ppl"]) == ["1", "0.5"] and m["heads_kept"] == {"1": 4, "0.5": 2}
    assert (out / "sparsity_ppl.png").stat().st_size > 0 and (out / "sparsity_layers.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "## Claims" in report and "Dense PPL" in report


@pytest.mark.slow
def test_without_close_calls_the_two_percent_claims_are_findings(setup, tmp_path):
    model, text, calib = setup
    out = tmp_path / "run"
    assert _reproduce(out, model, text, calib, "close_calls=false", "heads_keeps=1") == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    status = [c["status"] for c in claims]
    assert status[0] == status[2] == status[3] == "finding"  # oracle within 2%, CATS and TEAL lose > 2%
    assert status[1] in ("holds", "fails") and status[4] in ("holds", "fails")  # static vs oracle, cosine
    assert len(claims) == 7  # no heads finding with only keep 1


@pytest.mark.parametrize("fields, message", [
    ({"keeps": (1.0, 1.5)}, "keep fraction 1.5"),
    ({"heads_keeps": (0.0,)}, "keep fraction 0.0"),
    ({"at": 0.3}, "at=0.3 must be one of keeps"),
    ({"at": 1.0}, "below 1.0"),
    ({"window": 1}, "window=1"),
])
def test_config_refuses_impossible_runs(fields, message):
    with pytest.raises(UsageError, match=message):
        SparsityConfig(**fields)


def test_uncached_model_is_a_missing_resource_the_demo_skips(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "empty"))
    ctx = SimpleNamespace(device="cpu", out=tmp_path)
    with pytest.raises(MissingResource):
        run_contextual_sparsity(SparsityConfig(text=str(tmp_path / "t.txt"),
                                               calibration=(str(tmp_path / "c.txt"),)), ctx)
    text, calibration = texts_and_cache(tmp_path, monkeypatch)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(MissingResource, match="attnlab models fetch smollm2"):
        run_contextual_sparsity(SparsityConfig(text=str(text), calibration=(str(calibration),)), ctx)


def test_calibrating_on_the_evaluation_text_is_refused(setup):
    model, text, _ = setup
    with pytest.raises(ConfigError, match="is the evaluation text"):
        run_contextual_sparsity(SparsityConfig(model=str(model), text=str(text), calibration=(str(text),)),
                     SimpleNamespace(device="cpu"))
