"""The relu-control experiment end to end on a made-up text (the real run trains on tinyshakespeare,
which CI does not have): two tiny Llamas, relu vs silu, trained and measured alike."""
import json
import random

import pytest

from attnlab.cli import main
from attnlab.core.errors import ConfigError
from attnlab.sparsity.exp_relu import ReluControlConfig
from tiny_models import texts_and_cache

TINY = ["tokens=96", "vocab_size=300", "layers=2", "heads=2", "d_model=16", "d_ffn=32", "batch_size=4",
        "bptt=16", "steps=8", "keeps=0.5,0.25"]


@pytest.fixture
def text(tmp_path, monkeypatch):
    """A made-up text of 300 lines (the held-out tail: 30), and the attnlab cache (the BPE) under tmp_path."""
    texts_and_cache(tmp_path, monkeypatch)
    words = "the cat dog sat ran on a mat river bird fish swam flew over under while it and to".split()
    rng = random.Random(0)
    path = tmp_path / "made_up.txt"
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(8)) + "\n" for _ in range(300)))
    return path


def _reproduce(out, *sets):
    return main(["reproduce", "relu-control", "--out", str(out)] + [a for s in (*TINY, *sets) for a in ("--set", s)])


@pytest.mark.slow
def test_the_experiment_trains_both_twins_measures_them_and_states_its_claims(text, tmp_path):
    out = tmp_path / "run"
    assert _reproduce(out, f"text={text}") == 0
    m = json.loads((out / "metrics.json").read_text())
    relu, silu = m["models"]["relu"], m["models"]["silu"]
    for model in (relu, silu):
        assert set(model) == {"train_loss", "dense_ppl", "ppl", "ppl_increase", "zero_per_layer", "zero",
                              "mass_per_layer", "mass", "overlap_per_layer", "overlap"}
        assert set(model["ppl"]) == {"0.5", "0.25"} and len(model["zero_per_layer"]) == 2
        assert len(model["overlap_per_layer"]) == 2 and 0 < model["mass"] <= 1
    assert relu["zero"] > 0 and all(z > 0 for z in relu["zero_per_layer"])
    assert silu["zero"] == 0 and silu["zero_per_layer"] == [0.0, 0.0]
    assert relu["dense_ppl"] != silu["dense_ppl"]  # two models, not one measured twice
    status = [c["status"] for c in m["claims"]]
    assert all(s in ("holds", "fails") for s in status[:2]) and status[2:] == ["finding"] * 8
    assert all(c["status"] == "holds" or c.get("note") for c in m["claims"][:2])  # a failure says what was measured
    silu_zero, gap = m["claims"][2:4]  # what cannot fail, and a one-seed difference of tenths of a percent
    assert "SiLU twin: share of the entries of h exactly zero" in silu_zero["claim"] and silu_zero["measured"] == 0
    assert gap["measured"] == pytest.approx(silu["ppl_increase"]["0.5"] - relu["ppl_increase"]["0.5"])
    assert m["eval_tokens"] == 96 and (out / "relu_control.png").stat().st_size > 0
    for act in ("relu", "silu"):  # each saved as a model folder `attnlab sparsity --model` reads
        assert json.loads((out / act / "model" / "config.json").read_text())["hidden_act"] == act
        assert not (out / act / "checkpoint.pt").exists()


@pytest.mark.slow
def test_quick_judging_off_leaves_the_zeros_unresolved_and_checks_the_oracle(text, tmp_path):
    """judge=False: the exact-zero share (OPT's > 90%) is unresolved with the reason; the oracle's PPL claim, which
    this model's own zeros decide at any scale, is still checked."""
    out = tmp_path / "run"
    assert _reproduce(out, f"text={text}", "judge=false") == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    assert claims[0]["status"] == "unresolved" and "cannot decide" in claims[0]["note"]
    assert claims[1]["status"] in ("holds", "fails") and "oracle top-" in claims[1]["claim"]
    assert {c["status"] for c in claims[2:]} == {"finding"}


@pytest.mark.parametrize("fields, message", [
    ({"keeps": (0.5, 1.0)}, "keeps="), ({"keeps": ()}, "keeps="), ({"at": 0.3}, "at=0.3"),
    ({"holdout": 1.0}, "holdout=1.0"), ({"steps": 0}, "steps=0"), ({"vocab_size": 100}, "vocab_size=100"),
    ({"d_model": 30}, "d_model=30"), ({"lr": 0.0}, "lr=0.0")])
def test_config_refuses_impossible_runs(fields, message):
    with pytest.raises(ConfigError, match=message):
        ReluControlConfig(**fields)


def test_a_missing_text_or_a_short_held_out_tail_is_one_line(text, tmp_path, capsys):
    assert _reproduce(tmp_path / "a", f"text={tmp_path / 'nowhere.txt'}") == 2
    err = capsys.readouterr().err.strip()
    assert "text=" in err and "nowhere.txt" in err and len(err.splitlines()) == 1
    assert _reproduce(tmp_path / "b", f"text={text}", "tokens=100000") == 2
    err = capsys.readouterr().err.strip()
    assert "held-out tail" in err and "tokens=100000" in err and len(err.splitlines()) == 1
