"""`attnlab train`: a run folder, resume and extension, and bad input as one line with exit 2."""
import argparse
import errno
import json
from pathlib import Path

import pytest

from attnlab import cli
from attnlab.core.errors import UsageError
from attnlab.train import cli as train_cli
from attnlab.train import folder as train_folder


@pytest.fixture
def corpus(tmp_path):
    text = "the cat sat on the mat . a dog ran to the park , and the cat saw the dog .\n" * 80
    (tmp_path / "c.txt").write_text(text)
    return str(tmp_path / "c.txt")


def _train(corpus, out, *extra):
    return cli.main(["train", "--train", corpus, "--valid", corpus, "--out", str(out), "--d-model", "16",
                     "--d-ffn", "16", "--batch-size", "4", "--bptt", "8", "--track-every", "2",
                     "--eval-every", "4", "--checkpoint-every", "2", *extra])


def _lines(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_train_writes_a_run_and_extends_it(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "4") == 0
    assert "attnlab train: 4 steps" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"config.json", "tokenizer", "metrics.jsonl", "checkpoint.pt",
                                               "training.png"}
    assert _train(corpus, out, "--steps", "8", "--resume") == 0
    extended = _lines(out)
    assert _train(corpus, tmp_path / "straight", "--steps", "8") == 0
    assert extended == _lines(tmp_path / "straight")  # 4 + 4 steps = 8 straight steps


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_one_line(capsys, fragment):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnlab: error:") and fragment in err[0], err


def test_bad_input_leaves_the_run_untouched(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "2") == 0
    capsys.readouterr()
    before = _files(out)
    for extra, fragment in [
        (["--steps", "4", "--resume", "--lr", "1"], "different config"),
        (["--steps", "4"], "already holds a run"),
        # two things wrong: the changed setting is named first (checked before the text is read)
        (["--steps", "4", "--resume", "--bptt", "500"], "--bptt 8 then, 500 now"),
        (["--steps", "4", "--resume", "--max-vocab", "0"], "need vocab_size >= 1"),
        (["--steps", "4", "--resume", "--optimizer", "lion"], "optimizer"),
    ]:
        assert _train(corpus, out, *extra) == 2
        _assert_one_line(capsys, fragment)
        assert _files(out) == before
    assert _train(corpus, tmp_path / "new", "--steps", "4", "--bptt", "500") == 2  # alone, the length is named
    _assert_one_line(capsys, "bptt=500 is longer")
    assert not (tmp_path / "new").exists()
    assert _train(str(tmp_path / "gone.txt"), out, "--steps", "4", "--resume", "--lr", "1") == 2  # no text read
    _assert_one_line(capsys, "different config")


def test_missing_or_empty_corpus(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--train", "nope.txt", "--out", "r"]) == 2
    _assert_one_line(capsys, "--train=nope.txt: no such file")
    (tmp_path / "empty.txt").write_text("\n\n")
    assert cli.main(["train", "--train", "empty.txt", "--out", "r"]) == 2
    _assert_one_line(capsys, "empty")
    assert not (tmp_path / "r").exists()
    assert cli.main(["train", "--train", "empty.txt", "--out", "r", "--resume"]) == 2


@pytest.mark.slow
def test_holdout_validates_on_the_tail(tmp_path, capsys):
    lines = [f"line {i} the cat sat on the mat ." for i in range(400)]
    (tmp_path / "c.txt").write_text("\n".join(lines))
    argv = ["train", "--train", str(tmp_path / "c.txt"), "--d-model", "16", "--d-ffn", "16", "--batch-size", "2",
            "--bptt", "8", "--steps", "2", "--track-every", "2", "--eval-every", "2"]
    assert cli.main(argv + ["--out", str(tmp_path / "a"), "--holdout", "0.25"]) == 0
    (tmp_path / "head.txt").write_text("\n".join(lines[:300]))
    (tmp_path / "tail.txt").write_text("\n".join(lines[300:]))
    argv[2] = str(tmp_path / "head.txt")
    assert cli.main(argv + ["--out", str(tmp_path / "b"), "--valid", str(tmp_path / "tail.txt")]) == 0
    assert _lines(tmp_path / "a") == _lines(tmp_path / "b")  # same split, same run
    assert cli.main(argv + ["--out", str(tmp_path / "c"), "--holdout", "1.5"]) == 2
    _assert_one_line(capsys, "--holdout 1.5")


def test_train_command_follows_the_cli_protocol():
    assert train_cli.GROUP == "training"
    parser = argparse.ArgumentParser()
    train_cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "--train", "t.txt", "--out", "r"])
    assert args.func is train_cli.cmd_train
    args.argv = ["train", "--train", "t.txt", "--out", "r"]  # attnlab.cli.main puts it there
    from attnlab.experiments.command import config_from_args

    settings = train_cli._settings(config_from_args(train_cli.TrainRun, args), args)
    assert "func" not in settings and "argv" not in settings
    assert settings["out"] == "r" and settings["train"] == "t.txt"


@pytest.fixture
def no_tokenizer(monkeypatch):
    """Fail the test if a tokenizer gets built: bad --out must be refused before that."""
    def refuse(*a, **k):
        raise AssertionError("the tokenizer was built before --out was checked")

    monkeypatch.setattr("attnlab.models.tokenizer.make_tokenizer", refuse)


def test_out_that_cannot_be_written_is_refused_first(corpus, tmp_path, capsys, monkeypatch, no_tokenizer):
    (tmp_path / "some_file").write_text("x")
    assert _train(corpus, tmp_path / "some_file" / "run", "--steps", "2") == 2
    _assert_one_line(capsys, "is a file, so no folder can be made under it")

    def denied(*a, **k):  # we run as root, which may write anywhere: simulate a read-only location
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(train_folder.tempfile, "TemporaryFile", denied)
    assert _train(corpus, tmp_path / "ro" / "run", "--steps", "2") == 2
    _assert_one_line(capsys, f"cannot write in {tmp_path} (Permission denied)")
    assert not (tmp_path / "ro").exists()


@pytest.mark.parametrize("damage", ["empty", "truncated"])
@pytest.mark.slow
def test_resume_from_a_damaged_checkpoint(corpus, tmp_path, capsys, damage):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "2") == 0
    ckpt = out / "checkpoint.pt"
    ckpt.write_bytes(b"" if damage == "empty" else ckpt.read_bytes()[:200])
    capsys.readouterr()
    before = _files(out)
    assert _train(corpus, out, "--steps", "4", "--resume") == 2
    _assert_one_line(capsys, "is truncated, damaged or not written by attnlab train")
    assert _files(out) == before


@pytest.mark.slow
def test_resume_after_a_kill_mid_append(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "4") == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "train_lo')  # what a kill during an append leaves
    assert _train(corpus, out, "--steps", "8", "--resume") == 0
    assert "dropped a torn last line" in capsys.readouterr().err
    assert _train(corpus, tmp_path / "straight", "--steps", "8") == 0
    assert _lines(out) == _lines(tmp_path / "straight")


def test_act_is_refused_where_it_shapes_nothing(corpus, tmp_path, capsys, no_tokenizer):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text('{"model_type": "llama", "hidden_act": "silu"}')
    for extra, fragment in [
        ([], "--act applies to --model llama only (add --model llama or leave it out; the tutorial's feed-forward "
             "is always an ungated ReLU)"),
        (["--model", str(tmp_path / "folder")], "--act shape a new model"),
        (["--model", "llama", "--act", "swish"], "invalid choice: 'swish'"),
    ]:
        assert _train(corpus, tmp_path / "r", "--act", "relu", *extra, "--steps", "2") == 2, extra
        _assert_one_line(capsys, fragment)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_resume_refuses_a_changed_act(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    llama = ["--model", "llama", "--vocab-size", "300", "--layers", "1"]
    assert _train(corpus, out, *llama, "--act", "relu", "--steps", "2") == 0
    assert json.loads((out / "config.json").read_text())["act"] == "relu"
    assert json.loads((out / "model" / "config.json").read_text())["hidden_act"] == "relu"
    capsys.readouterr()
    before = _files(out)
    for act, fragment in [(["--act", "gelu"], "--act 'relu' then, 'gelu' now"),
                          ([], "--act 'relu' then, None now")]:  # leaving it out means silu: also a change
        assert _train(corpus, out, *llama, *act, "--steps", "4", "--resume") == 2
        _assert_one_line(capsys, fragment)
        assert _files(out) == before
    assert _train(corpus, out, *llama, "--act", "relu", "--steps", "4", "--resume") == 0
    assert _lines(out)[-1]["step"] == 4


def test_attention_variant_is_refused_where_it_shapes_nothing(corpus, tmp_path, capsys, no_tokenizer):
    for extra, fragment in [([], "--attention applies to --model llama only"),
                            (["--model", "llama", "--attention", "sigmoid"], "invalid choice: 'sigmoid'")]:
        assert _train(corpus, tmp_path / "r", "--attention", "softmax1", *extra, "--steps", "2") == 2, extra
        _assert_one_line(capsys, fragment)
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["sink-logit", "sink-token"])
def test_an_attention_variant_trains_saves_and_reloads(corpus, tmp_path, capsys, monkeypatch, variant):
    """The variant reaches the checkpoint: model/ reloads as it, a sink-token model with its own vocabulary
    entry (the tokenizer saved beside it knows it), and the probe records the sink metrics."""
    import torch

    from attnlab.models.causal_lm import load_causal_lm
    from attnlab.models.tokenizer import SINK, load_tokenizer

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    llama = ["--model", "llama", "--vocab-size", "300", "--layers", "1", "--optimizer", "adamw", "--lr", "1e-2",
             "--weight-decay", "0.1", "--attention", variant]
    assert _train(corpus, out, *llama, "--steps", "4") == 0
    model = load_causal_lm(out / "model")
    assert model.hf.config.attention_variant == variant
    line = _lines(out)[-1]
    assert len(line["sink_rate"]) == 8 + (variant == "sink-token")  # k < T: bptt 8, plus the sink's position
    assert len(line["norm0_ratio"]) == 1
    if variant == "sink-logit":
        assert not torch.equal(model.hf.model.layers[0].self_attn.sinks, torch.zeros(2))  # it learned
    else:
        tok = load_tokenizer(out / "model")
        assert model.sink_token_id == tok.sink_id == tok.vocab_size - 1 == model.hf.config.vocab_size - 1
        assert SINK not in tok.decode(tok.encode_lines(["the cat sat"]).tolist())


# ------------------------------------------------------------------- a full disk, a killed start, folders to keep
def _refuse_checkpoint(monkeypatch, after: int = 0, exc=None):
    """checkpoint.pt's write fails (ENOSPC, or ``exc``) once ``after`` checkpoints have been written."""
    from attnlab.train import trainer

    real, calls = trainer.write_atomic, []

    def write(path, data):
        calls.append(path)
        if len(calls) > after:
            raise exc or OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(trainer, "write_atomic", write)


@pytest.mark.slow
def test_a_full_disk_before_the_first_checkpoint_leaves_nothing(corpus, tmp_path, capsys, monkeypatch):
    _refuse_checkpoint(monkeypatch)
    out = tmp_path / "a" / "run"
    assert _train(corpus, out, "--steps", "2") == 2
    _assert_one_line(capsys, f"--out {out}: no space left on device: free space or choose another --out")
    assert list(tmp_path.iterdir()) == [Path(corpus)]  # no half-written run, nor the folder made for it
    (tmp_path / "mine").mkdir()  # a folder the user made stays, empty
    assert _train(corpus, tmp_path / "mine", "--steps", "2") == 2
    assert list((tmp_path / "mine").iterdir()) == []


def test_ctrl_c_before_the_first_checkpoint_leaves_nothing(corpus, tmp_path, capsys, monkeypatch):
    _refuse_checkpoint(monkeypatch, exc=KeyboardInterrupt())
    assert _train(corpus, tmp_path / "run", "--steps", "2") == 130
    assert not (tmp_path / "run").exists()


def test_a_full_disk_after_a_checkpoint_keeps_the_run_to_resume(corpus, tmp_path, capsys, monkeypatch):
    _refuse_checkpoint(monkeypatch, after=1)  # the checkpoint at step 2 is written, the one at step 4 is not
    out = tmp_path / "run"
    assert _train(corpus, out, "--steps", "4") == 2
    _assert_one_line(capsys, f"--out {out}: no space left on device: the run is kept up to its checkpoint at step "
                             "2: free space, then add --resume")
    assert {"config.json", "tokenizer", "metrics.jsonl", "checkpoint.pt"} == {p.name for p in out.iterdir()}
    monkeypatch.undo()
    assert _train(corpus, out, "--steps", "4", "--resume") == 0
    assert [line["step"] for line in _lines(out)] == [0, 2, 4]


def _unfinished_start(corpus, out):
    """What a start killed before its first checkpoint leaves (a finished run, less what comes after it)."""
    assert _train(corpus, out, "--steps", "2") == 0
    for name in ("checkpoint.pt", "training.png"):
        (out / name).unlink()
    (out / ".checkpoint.pt.tmp-4000000").write_bytes(b"half a checkpoint")  # a kill during its write


@pytest.mark.parametrize("resume", [[], ["--resume"]])
@pytest.mark.slow
def test_a_start_killed_before_its_first_checkpoint_starts_again(corpus, tmp_path, capsys, resume):
    """No dead end: the re-run said "add --resume", and --resume said "start without --resume"."""
    out = tmp_path / "run"
    _unfinished_start(corpus, out)
    straight = _lines(out)
    capsys.readouterr()
    assert _train(corpus, out, "--steps", "2", *resume) == 0
    err = capsys.readouterr().err
    assert f"attnlab train: {out} holds a start that stopped before its first checkpoint: starting again from " \
           "step 0" in err
    assert _lines(out) == straight and (out / "checkpoint.pt").is_file()


@pytest.mark.slow
def test_a_killed_start_resumed_with_other_settings_is_refused(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    _unfinished_start(corpus, out)
    capsys.readouterr()
    before = _files(out)
    assert _train(corpus, out, "--steps", "2", "--resume", "--lr", "1") == 2
    _assert_one_line(capsys, "--lr 5.0 then, 1.0 now")
    assert _files(out) == before
    assert _train(corpus, out, "--steps", "2", "--lr", "1") == 0  # without --resume: a new start, nothing lost
    assert json.loads((out / "config.json").read_text())["lr"] == 1.0


def test_folders_a_run_would_lose_files_in_are_refused(corpus, tmp_path, capsys, no_tokenizer):
    """`attnlab train --out D` overwrote a config.json of the user's in D."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    dejavu = tmp_path / "dejavu"
    (dejavu / "predictors").mkdir(parents=True)
    (dejavu / "config.json").write_text('{"experiment": "dejavu"}')
    (dejavu / "metrics.json").write_text('{"experiment": "dejavu"}')
    finished = tmp_path / "finished"  # a run whose checkpoint.pt was deleted to save space: model/ stays
    (finished / "model").mkdir(parents=True)
    (finished / "config.json").write_text('{"command": "train"}')
    (finished / "training.png").write_bytes(b"\x89PNG")
    for out, extra, fragment in [
        (mine, [], f"--out {mine} already holds other files: choose an empty or new folder"),
        (dejavu, [], f"--out {dejavu} holds a `dejavu` run (its predictors/ would be lost), which only another "
                     "`dejavu` run may replace: choose another folder"),
        (finished, [], "holds a train run with no checkpoint.pt to resume (its model/, training.png would be lost)"),
        (finished, ["--resume"], "(its model/, training.png would be lost)"),
        (tmp_path / "new", ["--resume"], f"--resume: {tmp_path / 'new'} holds no run; start without --resume"),
    ]:
        before = _files(tmp_path)
        assert _train(corpus, out, "--steps", "2", *extra) == 2, out
        _assert_one_line(capsys, fragment)
        assert _files(tmp_path) == before


def test_a_run_written_when_flags_were_texts_resumes_under_their_tuples(tmp_path):
    """config.json of a run started before `attnlab train` read its flags through the config contract held
    --snapshot-steps as one text; resuming it compares the same steps, and a changed step is still refused."""
    (tmp_path / "config.json").write_text(json.dumps({"snapshot_steps": "100,200", "group_lr": [], "bptt": 8}))
    train_folder.check_resume(tmp_path, {"snapshot_steps": (100, 200), "group_lr": (), "bptt": 8})
    with pytest.raises(UsageError, match="--snapshot-steps '100,200' then, \\(100, 300\\) now"):
        train_folder.check_resume(tmp_path, {"snapshot_steps": (100, 300), "group_lr": (), "bptt": 8})
