"""benchmarks/million_tokens.py: bad input is one line and exit code 2, before any model is loaded."""
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def million(monkeypatch):
    """The script as a module (its folder on the path, as when it runs), with a model loader that fails the
    test: every error here must come before a model is loaded."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("million_tokens", BENCHMARKS / "million_tokens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    real = module.load_model

    def only_to_resolve(name, *a, **k):  # an unknown name fails in resolving it, before any weights are read
        if name == "smolm2":
            return real(name, *a, **k)
        raise AssertionError(f"a model was loaded ({name}) before the input was checked")

    monkeypatch.setattr(module, "load_model", only_to_resolve)
    return module


@pytest.fixture
def text(tmp_path):
    (tmp_path / "t.txt").write_text("the cat sat on the mat.\n" * 50)
    return str(tmp_path / "t.txt")


def _fails(million, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        million.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("million_tokens.py: error: "), err
    return err[0]


SMALL = ["--tokens", "256", "--segment", "128", "--budget", "16", "--check-tokens", "32", "--samples", "2"]


@pytest.mark.parametrize("argv, fragment", [
    (["--policies", "lru"], "--policies lru: unknown KV policy 'lru'"),
    (["--policies", "sinks", "--budget", "4", "--check-tokens", "8"], "--policies sinks: budget 4 leaves no room"),
    (["--model", "smolm2"], "unknown model 'smolm2': did you mean smollm2?"),
    (["--chunk", "0"], "argument --chunk: '0': give a whole number >= 1"),
    (["--samples", "nan"], "argument --samples: 'nan': give a whole number >= 1"),
    (["--texts", "a.txt,"], "--texts 'a.txt,': name one corpus or more"),
    (["--tokens", "many"], "argument --tokens: 'many': give a whole number >= 1"),
])
def test_bad_input_is_one_line(million, text, tmp_path, capsys, argv, fragment):
    out = tmp_path / "run"
    line = _fails(million, [*SMALL, "--texts", text, *argv, "--out", out], capsys)
    assert fragment in line
    assert not out.exists()


def test_an_empty_or_missing_text_is_one_line(million, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n \n")
    assert "the corpus is empty" in _fails(million, [*SMALL, "--texts", tmp_path / "empty.txt", "--out",
                                                     tmp_path / "r"], capsys)
    assert "texts=nope.txt: no such file" in _fails(million, [*SMALL, "--texts", "nope.txt", "--out", tmp_path / "r"],
                                                    capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("mode", [[], ["--redraw"], ["--merge", "part"]])
def test_out_an_existing_file_is_one_line_and_kept(million, text, tmp_path, capsys, mode):
    f = tmp_path / "report.txt"
    f.write_text("mine")
    assert f"--out {f} is a file" in _fails(million, [*SMALL, "--texts", text, *mode, "--out", f], capsys)
    assert f.read_text() == "mine"


def test_redraw_of_a_folder_without_a_run_is_one_line(million, tmp_path, capsys):
    line = _fails(million, ["--out", tmp_path, "--redraw"], capsys)
    assert "million_tokens.json: FileNotFoundError; give the --out of a million_tokens.py run" in line


def test_a_full_disk_at_the_checkpoint_is_one_line_naming_the_fix(million, tmp_path, monkeypatch):
    """torch.save refused by the disk: one line saying a rerun resumes, no half-written checkpoint left, and the
    previous complete checkpoint untouched."""
    import errno
    from types import SimpleNamespace

    from attnlab.core.errors import UsageError

    out = tmp_path / "run"
    out.mkdir()
    (out / million.CHECKPOINT).write_bytes(b"the last complete checkpoint")

    def full(obj, path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file") \
            from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(million.torch, "save", full)
    monkeypatch.setattr(million, "settings", lambda args: {})
    args = SimpleNamespace(out=out)
    with pytest.raises(UsageError, match="No space left on device.*resumes from the last complete checkpoint") as e:
        million.save({"caches": {}}, {}, args)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in out.iterdir()) == [million.CHECKPOINT]
    assert (out / million.CHECKPOINT).read_bytes() == b"the last complete checkpoint"
