"""Damaged predictors, a rank that does not match and a rank no machine here can train: refused in one line
with exit 2 by `attnlab sparsity --rule predicted --predictors P` and `attnlab reproduce dejavu --set
predictors=P` alike, before anything is written; and dejavu's other impossible settings."""
import json
import os

import pytest
import torch

from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.evals.inputs import load_model
from attnlab.sparsity import predictors as predictors_mod
from attnlab.sparsity.predictor_store import META, WEIGHTS, load_predictors, save_predictors
from attnlab.sparsity.predictors import SOURCES, check_fits, new_predictors, training_bytes
from tiny_models import byte_tokenizer, texts_and_cache, tiny

LINE = "train them again (attnlab reproduce dejavu) or give another predictors folder"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A 4-layer tiny llama folder (dejavu compares middle and edge layers), a text, and untrained predictors
    for it saved as a dejavu run saves them (``P/own``, ``P/lookahead``)."""
    text, _ = texts_and_cache(tmp_path, monkeypatch)
    folder = tmp_path / "m"
    tiny("llama", vocab_size=300, num_hidden_layers=4, max_position_embeddings=64, tie_word_embeddings=True,
         bos_token_id=256, eos_token_id=256).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    model, _ = load_model(str(folder))
    for s in SOURCES:
        save_predictors(new_predictors(model, str(folder), 8, 0.5, s), tmp_path / "P" / s)
    return folder, text, tmp_path / "P"


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _wrong_rank(path):
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "r": 4}))  # the weights stay rank 8


DAMAGE = {  # name -> (file, how, what the one line says)
    "not JSON": (META, lambda p: p.write_text("{not json"), "is not JSON"),
    "{}": (META, lambda p: p.write_text("{}"), "does not describe predictors (missing model, fingerprint"),
    "[]": (META, lambda p: p.write_text("[]"), "does not describe predictors (a JSON list, not an object)"),
    "a field of the wrong type": (META, lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "r": "8"})),
                                  "n_layers, d, d_ff and r must be positive integers"),
    "truncated weights": (WEIGHTS, _truncate, "cannot be read (Error while deserializing header"),
    "empty weights": (WEIGHTS, lambda p: p.write_bytes(b""), "cannot be read (Error while deserializing header"),
    "random bytes": (WEIGHTS, lambda p: p.write_bytes(os.urandom(4096)), "cannot be read"),
    "no weights": (WEIGHTS, lambda p: p.unlink(), "predictors.safetensors is missing"),
    "another rank": (META, _wrong_rank,  # lookahead: layers 1..3
                     "holds w1 (3, 32, 8), w2 (3, 8, 64), b2 (3, 64), not the rank-4 predictors"),
}


def _sparsity(folder, text, out, predictors):
    return ["sparsity", "--model", str(folder), "--text", str(text), "--tokens", "64", "--window", "32", "--rule",
            "predicted", "--predictors", str(predictors), "--out", str(out)]


def _dejavu(folder, text, out, predictors):
    sets = [f"model={folder}", f"text={text}", "tokens=64", "window=32", f"predictors={predictors}"]
    return ["reproduce", "dejavu", "--out", str(out)] + [a for s in sets for a in ("--set", s)]


@pytest.mark.parametrize("command", [_sparsity, _dejavu], ids=["sparsity", "dejavu"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_predictors_are_one_line_exit_2_and_nothing_written(setup, tmp_path, capsys, command, damage):
    folder, text, predictors = setup
    name, how, message = DAMAGE[damage]
    how(predictors / "lookahead" / name)  # the lookahead source reads own too: damage the one read second
    out = tmp_path / "out"
    assert main(command(folder, text, out, predictors)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and str(predictors / "lookahead") in err and LINE in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_a_folder_named_for_another_rank_than_it_holds_is_refused(setup, tmp_path):
    folder, _, predictors = setup
    model, _ = load_model(str(folder))
    renamed = tmp_path / "neurons-own-r16-keep0.5"
    (predictors / "own").rename(renamed)
    with pytest.raises(UsageError, match=r"named for other predictors than it holds \(r 16 \(name\) vs 8 \(saved\)"):
        load_predictors(renamed, model)


def test_training_needs_at_least_four_copies_of_the_predictors_and_grows_with_the_rank():
    model = tiny("llama", num_hidden_layers=3)
    params = sum(p.numel() for s in SOURCES for p in new_predictors(model, "tiny", 16, 0.5, s).parameters())
    need = training_bytes(model, 16, ("neurons",), batch=32, window=64)
    assert need >= 4 * 4 * params  # float32 weights, gradients and AdamW's two moments
    assert training_bytes(model, 32, ("neurons",), 32, 64) > need
    assert training_bytes(model, 16, ("neurons", "heads"), 32, 64) > need


def test_a_rank_this_machine_cannot_hold_is_refused_before_anything_is_allocated(setup, tmp_path, capsys,
                                                                                   monkeypatch):
    folder, text, _ = setup
    monkeypatch.setattr(predictors_mod, "memory_bytes", lambda: 64 * 2**20)  # a 64 MiB machine
    model, _ = load_model(str(folder))
    check_fits(model, 8, ("neurons",), 128, 512)  # the default batch and window at a small rank fit
    made = []
    monkeypatch.setattr(predictors_mod, "Predictors", lambda *a: made.append(a))  # nothing may be built
    out = tmp_path / "out"
    sets = [f"model={folder}", f"text={text}", f"train_texts={text.parent / 'other.txt'}", "tokens=64",
            "train_tokens=64", "window=32", "rank=100000"]
    assert main(["reproduce", "dejavu", "--out", str(out)] + [a for s in sets for a in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("attnlab: error: rank=100000: training the predictors")
    assert "GiB of memory this machine has beside the model's weights: give rank <= " in err
    assert not made and not out.exists()


@pytest.mark.parametrize("lr", ["-1", "0", "nan"])
def test_a_learning_rate_that_is_not_positive_is_one_line(setup, tmp_path, capsys, lr):
    folder, text, _ = setup
    assert main(["reproduce", "dejavu", "--out", str(tmp_path / "o"), "--set", f"lr={lr}"]) == 2
    err = capsys.readouterr().err.strip()
    why = "give lr a finite number" if lr == "nan" else f"lr={float(lr)}: give a positive learning rate"
    assert len(err.splitlines()) == 1 and why in err  # NaN: refused by the one number check, before the config


def test_the_predictors_loaded_from_a_sound_folder_are_the_saved_ones(setup):
    folder, _, predictors = setup
    model, _ = load_model(str(folder))
    p = load_predictors(predictors / "own", model)
    x = torch.randn(3, 32)
    assert torch.equal(p.logits(x, 1), new_predictors(model, str(folder), 8, 0.5, "own").logits(x, 1))
