"""core.io.staged_dir: a folder built aside replaces its target whole, or leaves it untouched; a full disk is
recognised wherever a library reports it."""
import errno

import pytest

from attnlab.core import io


def _hidden(parent):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_a_finished_block_replaces_the_target_whole(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with io.staged_dir(target) as stage:
        assert stage.parent == tmp_path and stage.name.startswith(".run.partial-")
        (stage / "new.txt").write_text("new")
        assert (target / "old.txt").exists()  # the old folder stays whole until the block ends
    assert [p.name for p in target.iterdir()] == ["new.txt"] and _hidden(tmp_path) == []


def test_a_failed_block_leaves_the_target_and_removes_what_it_made(tmp_path):
    target = tmp_path / "a" / "b" / "run"
    with pytest.raises(ValueError), io.staged_dir(target) as stage:
        (stage / "half.txt").write_text("x")
        raise ValueError("bad")
    assert list(tmp_path.iterdir()) == []  # no staging folder, no parent folders made for it


def test_a_failed_last_rename_keeps_the_finished_folder_visibly(tmp_path, monkeypatch):
    def refuse(build, target):
        raise OSError(16, "Device or resource busy")

    target = tmp_path / "run"
    monkeypatch.setattr(io, "swap_into_place", refuse)
    with pytest.raises(io.NotPlaced) as e, io.staged_dir(target) as stage:
        (stage / "result.txt").write_text("done")
    kept = e.value.kept
    assert kept.parent == tmp_path and kept.name.startswith("run.finished-") and e.value.target == target
    assert (kept / "result.txt").read_text() == "done" and str(kept) in str(e.value)
    assert e.value.reason == "Device or resource busy" and isinstance(e.value, OSError)
    assert _hidden(tmp_path) == [] and not target.exists()
    monkeypatch.undo()
    with io.staged_dir(target) as stage:  # the next build does not clean the kept results away
        (stage / "result.txt").write_text("again")
    assert (kept / "result.txt").exists() and (target / "result.txt").read_text() == "again"


def test_disk_refusal_reads_errno_chains_and_rust_messages():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert io.disk_refusal(full) is full and io.disk_refusal(OSError(errno.ENOENT, "gone")) is None
    wrapped = RuntimeError("writer failed")
    wrapped.__context__ = full
    assert io.disk_refusal(wrapped) is full
    rust = io.disk_refusal(Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert isinstance(rust, OSError) and rust.errno == errno.ENOSPC
    assert io.disk_refusal(Exception("I/O error: not found (os error 2)")) is None
    assert io.disk_refusal(ValueError("(os error x)")) is None and io.disk_refusal(None) is None


def test_a_refused_write_is_one_usage_line_and_the_old_file_stays(tmp_path, monkeypatch):
    from attnlab.core.errors import UsageError

    target = tmp_path / "page.html"
    target.write_text("old")

    def read_only(self, data):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(type(target), "write_bytes", read_only)
    with pytest.raises(UsageError, match=r"--page .*page.html: cannot write there \(read-only file system\): "
                                         r"choose another --page \(the file there is untouched\)"):
        io.write_output(target, "new", "--page")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_only_a_file_carrying_the_marker_is_replaced_without_force(tmp_path):
    from attnlab.core.errors import UsageError

    mine, ours = tmp_path / "notes.txt", tmp_path / "old.html"
    mine.write_text("notes")
    ours.write_text("<html>" + " " * 1000 + "<!-- MARK -->")
    io.check_replaceable(ours, b"MARK", "a page")
    io.check_replaceable(tmp_path / "new.html", b"MARK", "a page")  # nothing there yet
    io.check_replaceable(mine, b"MARK", "a page", force=True)
    with pytest.raises(UsageError, match="notes.txt exists and is not a page: .* add --force"):
        io.check_replaceable(mine, b"MARK", "a page")
