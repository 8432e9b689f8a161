"""Run folders: which run a folder holds, which runs may replace it, and a full disk while a run is written
(one line naming --out and the fix; the staging folder removed, a previous run as it was)."""
import dataclasses
import errno
import json

import pytest

from attnlab import cli
from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry
from attnlab.experiments import registry, runner
from attnlab.experiments.registry import Result


def _run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _one_line(code, err, fragment):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attnlab: error: "), err
    assert fragment in lines[0], lines[0]
    return lines[0]


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _with_run(monkeypatch, name, run_fn):
    """The registry for this test, with experiment ``name`` running ``run_fn`` (instant, no figures)."""
    patched = Registry("experiment", "see `attnlab list`")
    for n, exp in registry.load_all().items():
        patched.add(n, dataclasses.replace(exp, run=run_fn) if n == name else exp)
    monkeypatch.setattr(registry, "EXPERIMENTS", patched)


def _writes(cfg, ctx):
    (ctx.out / "note.txt").write_text("written by the run")
    return Result([], {})


def _fake_run(folder, experiment, *extra):
    """A folder as a run of ``experiment`` leaves it: config.json, metrics.json, report.md, and ``extra`` files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"experiment": experiment, "seed": 0}))
    (folder / "metrics.json").write_text(json.dumps({"experiment": experiment, "claims": []}))
    (folder / "report.md").write_text("# a report\n")
    for name in extra:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"\x00trained")
    return folder


def _hidden(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- which run a folder holds
def test_run_kind_reads_the_experiment_the_train_marker_and_the_demo(tmp_path):
    assert runner.run_kind(_fake_run(tmp_path / "a", "dejavu")) == "dejavu"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({"command": "train", "train": "t.txt"}))
    assert runner.run_kind(tmp_path / "b") == "train"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "index.html").write_text("<!doctype html><html><head><title>attnlab demo</title>")
    assert runner.run_kind(tmp_path / "c") == "demo"
    (tmp_path / "d").mkdir()  # a user's own: a site, a config of theirs, a binary file named config.json
    (tmp_path / "d" / "index.html").write_text("<html><title>my site</title>")
    (tmp_path / "d" / "config.json").write_bytes(b"\xff\xfe\x00")
    assert runner.run_kind(tmp_path / "d") is None
    (tmp_path / "d" / "config.json").write_text('{"mine": 1}')
    assert runner.run_kind(tmp_path / "d") is None and runner.run_kind(tmp_path / "missing") is None


def test_a_run_of_another_experiment_is_never_replaced(tmp_path, capsys, monkeypatch):
    """`attnlab probe --out <a dejavu run>` replaced the folder and deleted its trained predictors."""
    def never(cfg, ctx):
        raise AssertionError("the run started although --out holds another experiment's run")

    _with_run(monkeypatch, "scansnap-fig4", never)
    out = _fake_run(tmp_path / "dv", "dejavu", "predictors/own/layer0.safetensors", "fig.png")
    before = _files(out)
    line = _one_line(*_run(["reproduce", "scansnap-fig4", "--out", out], capsys),
                     f"--out {out} holds a `dejavu` run (its predictors/ would be lost), which only another "
                     "`dejavu` run may replace: choose another folder")
    assert "fig.png" not in line  # the run's own files are not listed as the loss
    assert _files(out) == before and _hidden(tmp_path) == []


def test_the_probe_command_refuses_a_dejavu_run_before_loading_a_model(tmp_path, capsys):
    out = _fake_run(tmp_path / "dv", "dejavu", "predictors/own/layer0.safetensors")
    before = _files(out)
    code, err = _run(["probe", "--model", tmp_path / "no-such-model", "--out", out], capsys)
    _one_line(code, err, "holds a `dejavu` run (its predictors/ would be lost)")
    assert _files(out) == before


def test_a_run_of_the_same_experiment_is_replaced_once_the_new_one_completes(tmp_path, capsys, monkeypatch):
    _with_run(monkeypatch, "scansnap-fig4", _writes)
    out = _fake_run(tmp_path / "run", "scansnap-fig4", "stale.txt")
    code, err = _run(["reproduce", "scansnap-fig4", "--out", out], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.json", "note.txt", "report.md"]
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("held, kind, fragment", [
    ("demo", "scansnap-fig4", "holds a `demo` run (its joma-linear/, scansnap-fig4/ would be lost)"),
    ("scansnap-fig4", "demo", "holds a `scansnap-fig4` run, which only another `scansnap-fig4` run may replace"),
    ("demo", "demo", None),
])
def test_the_demo_folder_is_a_demo_run(tmp_path, held, kind, fragment):
    out = tmp_path / "d"
    if held == "demo":
        for name in ("scansnap-fig4", "joma-linear"):
            _fake_run(out / name, name)
        (out / "index.html").write_text("<!doctype html><html lang='en'><head><title>attnlab demo</title></head>")
    else:
        _fake_run(out, held)
    before = _files(out)
    if fragment is None:
        with runner.staged_output(out, kind) as stage:
            (stage / "index.html").write_text("<title>attnlab demo</title> again")
        assert _files(out) == {"index.html": b"<title>attnlab demo</title> again"}
        return
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        with runner.staged_output(out, kind):
            raise AssertionError("the block ran")
    assert _files(out) == before


# --------------------------------------------------------------------------- a full disk while a run is written
@pytest.mark.parametrize("code, fix", [
    (errno.ENOSPC, "no space left on device: free space or choose another --out"),
    (errno.EDQUOT, "disk quota exceeded: free space or choose another --out"),
    (errno.EROFS, "read-only file system: choose another --out"),
])
def test_a_full_disk_is_one_line_and_keeps_the_previous_run(tmp_path, capsys, monkeypatch, code, fix):
    _with_run(monkeypatch, "scansnap-fig4", _writes)
    out = _fake_run(tmp_path / "run", "scansnap-fig4")
    before = _files(out)

    def refused(path, data):  # the contract files are the run's last writes
        raise OSError(code, "refused")

    monkeypatch.setattr(runner, "write_atomic", refused)
    monkeypatch.setattr(runner, "write_json", refused)
    _one_line(*_run(["reproduce", "scansnap-fig4", "--out", out], capsys),
              f"--out {out}: {fix} (the previous run there is untouched)")
    assert _files(out) == before and _hidden(tmp_path) == []  # no staging folder left
    monkeypatch.undo()
    _with_run(monkeypatch, "scansnap-fig4", _writes)
    fresh = tmp_path / "a" / "new"
    monkeypatch.setattr(runner, "write_json", refused)
    _one_line(*_run(["reproduce", "scansnap-fig4", "--out", fresh], capsys), f"--out {fresh}: {fix}")
    assert not (tmp_path / "a").exists()  # nor the parent folder made for it


def test_a_full_disk_inside_a_library_error_is_one_line(tmp_path, capsys, monkeypatch):
    """A figure or a checkpoint written by a library: its own error raised while handling ENOSPC."""
    def fails(cfg, ctx):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("PytorchStreamWriter failed writing file")  # as libraries do

    _with_run(monkeypatch, "scansnap-fig4", fails)
    out = tmp_path / "run"
    _one_line(*_run(["reproduce", "scansnap-fig4", "--out", out], capsys),
              f"--out {out}: no space left on device: free space or choose another --out")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_elsewhere_names_the_file(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "elsewhere" / "cache" / "tok.json"

    def fails(cfg, ctx):
        raise OSError(errno.ENOSPC, "No space left on device", str(cache))

    _with_run(monkeypatch, "scansnap-fig4", fails)
    out = tmp_path / "runs" / "run"
    _one_line(*_run(["reproduce", "scansnap-fig4", "--out", out], capsys),
              f"cannot write {cache}: no space left on device: free space there")


def test_other_errors_are_not_taken_for_a_full_disk(tmp_path, monkeypatch):
    def fails(cfg, ctx):
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"), runner.staged_output(tmp_path / "run", "x") as stage:
        fails(None, stage)
    assert list(tmp_path.iterdir()) == []
