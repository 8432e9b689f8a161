"""dejavu-relu and dejavu-curve end to end on made-up texts and a tiny model folder (the real runs train on KJV,
War and Peace and Tiny Shakespeare, and read SmolLM2, which CI does not have)."""
import json
import math
import random

import pytest

from attnlab.cli import main
from tiny_models import byte_tokenizer, texts_and_cache, tiny

RELU = ["tokens=96", "vocab_size=300", "layers=2", "heads=2", "d_model=16", "d_ffn=32", "batch_size=4", "bptt=16",
        "steps=6", "ranks=4,8", "checkpoints=64,160", "epochs=1", "pred_batch=16", "speed_steps=2",
        "speed_repeats=1", "holdout=0.1"]


@pytest.fixture
def words(tmp_path, monkeypatch):
    """Two made-up texts of 200 lines each, and the attnlab cache (the BPE) under tmp_path."""
    texts_and_cache(tmp_path, monkeypatch)
    vocab = "the cat dog sat ran on a mat river bird fish swam flew over under while it and to".split()
    rng = random.Random(0)
    paths = []
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("".join(" ".join(rng.choice(vocab) for _ in range(8)) + "\n"
                                             for _ in range(200)))
        paths.append(str(tmp_path / name))
    return ",".join(paths)


def _reproduce(name, out, sets):
    return main(["reproduce", name, "--out", str(out)] + [a for s in sets for a in ("--set", s)])


@pytest.mark.slow
def test_dejavu_relu_trains_measures_and_states_its_claims(words, tmp_path):
    out = tmp_path / "run"
    assert _reproduce("dejavu-relu", out, [*RELU, f"texts={words}"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["zero_per_layer"]) == 2 and 0 < m["zero"] < 1  # ReLU: exact zeros, not all
    assert m["keep"] == min(0.95, math.ceil((1 - m["zero"]) * 20 - 1e-9) / 20)  # the natural density, rounded up
    assert [(r["rank"], r["tokens"]) for r in m["curve"]] == [(4, 64), (4, 160), (8, 64), (8, 160)]
    assert set(m["ppl"]) == {"dense", "oracle", "predicted"} and m["decode"]["ceiling"] > 0
    claims = m["claims"]
    assert [c["status"] in ("holds", "fails") for c in claims[:4]] == [True] * 4
    assert all(c["status"] == "holds" or c.get("note") for c in claims[:4])  # a failure says what was measured
    assert "rank 8, 160 tokens" in claims[1]["claim"]  # the largest rank at the most tokens
    assert (out / "model" / "config.json").exists() and (out / "dejavu_relu.png").exists()
    assert all((out / "predictors" / s / "predictors.json").exists() for s in ("own", "lookahead"))
    assert 0 <= m["lookahead_recall"] <= 1 and len(list((out / "model" / "predictors").iterdir())) == 2


@pytest.mark.slow
def test_dejavu_curve_reads_any_model_and_checks_the_readmes_statement(tmp_path, monkeypatch):
    text, train = texts_and_cache(tmp_path, monkeypatch)
    folder = tmp_path / "m"
    tiny("llama", vocab_size=300, num_hidden_layers=2, max_position_embeddings=64, tie_word_embeddings=True,
         bos_token_id=256, eos_token_id=256).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    out = tmp_path / "curve"
    assert _reproduce("dejavu-curve", out, [f"model={folder}", f"text={text}", f"train_texts={train}", "tokens=64",
                                           "window=32", "ranks=4,8", "checkpoints=64,128", "batch=16"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    curve = m["curve"]
    assert [(r["rank"], r["tokens"]) for r in curve] == [(4, 64), (4, 128), (8, 64), (8, 128)]
    claims = [c for c in m["claims"] if c["status"] != "finding"]
    assert len(claims) == 4 and "more tokens do not help" in claims[2]["claim"]
    assert "more rank does not help" in claims[3]["claim"]
    # a 2 x 2 design: the least-squares slope is the mean first difference over the other factor, per doubling
    by = {(r["rank"], r["tokens"]): r["recall"] for r in curve}
    assert claims[2]["measured"] == pytest.approx((by[4, 128] - by[4, 64] + by[8, 128] - by[8, 64]) / 2)
    assert claims[3]["measured"] == pytest.approx((by[8, 64] - by[4, 64] + by[8, 128] - by[4, 128]) / 2)
    for c in claims:  # every checked claim carries its interval over the 2 layers, and the interval decides it
        lo, hi = c["interval"]
        assert c["n"] == 2 and lo <= c["measured"] <= hi + 1e-12 and c["status"] in ("holds", "fails", "unresolved")
    assert m["fit"]["slopes"]["tokens"] == pytest.approx(claims[2]["measured"])


@pytest.mark.slow
def test_quick_scale_runs_check_what_their_scale_decides(words, tmp_path, monkeypatch):
    """judge=False (the quick modes' setting): Deja Vu's claims are unresolved with the reason, and each run still
    decides at least one claim (dejavu-relu: at least half of h exactly zero; dejavu-curve: beats chance)."""
    out = tmp_path / "relu"
    assert _reproduce("dejavu-relu", out, [*RELU, f"texts={words}", "judge=false"]) == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    assert [c["status"] for c in claims[:4]] == ["unresolved"] * 4 and all("cannot decide" in c["note"]
                                                                            for c in claims[:4])
    assert claims[4]["status"] in ("holds", "fails") and "at least half of h is exactly zero" in claims[4]["claim"]
    folder = tmp_path / "m"
    text, train = texts_and_cache(tmp_path, monkeypatch)
    tiny("llama", vocab_size=300, num_hidden_layers=2, max_position_embeddings=64, tie_word_embeddings=True,
         bos_token_id=256, eos_token_id=256).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    assert _reproduce("dejavu-curve", tmp_path / "curve", [f"model={folder}", f"text={text}", f"train_texts={train}",
                                                           "tokens=64", "window=32", "ranks=4", "checkpoints=64,128",
                                                           "batch=16", "judge=false"]) == 0
    claims = [c for c in json.loads((tmp_path / "curve" / "metrics.json").read_text())["claims"]
              if c["status"] != "finding"]
    assert [c["status"] in ("holds", "fails") for c in claims] == [False, True, False]
    assert claims[1]["claim"].startswith("x predicts the set at all") and claims[1]["n"] == 2


@pytest.mark.parametrize("name, sets, says", [
    ("dejavu-relu", ["keep=1.5"], "keep=1.5"),
    ("dejavu-relu", ["checkpoints=64,32"], "increasing"),
    ("dejavu-relu", ["ranks=0"], "ranks"),
    ("dejavu-curve", ["keep=1.0"], "nothing to predict"),
    ("dejavu-curve", ["ranks=512,128"], "increasing ranks"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, name, sets, says):
    assert _reproduce(name, tmp_path / "x", sets) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "x").exists()
