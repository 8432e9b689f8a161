"""`attnlab view --out`: an earlier page is replaced, a file of the user's only with --force; a folder that takes
no file, or a disk that refuses the write, is one line and exit code 2, and the old file stays as it was."""
import errno
import os
import pathlib

import pytest

from attnlab.cli import main
from view.conftest import page_data

OLD_PAGE = '<!doctype html>\n<script type="application/json" id="attnlab-data">{"T": 1}</script>\n'


def _argv(view, out, *extra):
    return ["view", "--model", str(view.folder), "--text", "the cat sat", "--policies", "", "--out", str(out), *extra]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_the_page_carries_the_marker_an_earlier_page_is_known_by(view):
    from attnlab.view.cli import PAGE_MARKER

    assert PAGE_MARKER in view.path.read_bytes()[:1 << 16]


def test_a_file_that_is_no_page_is_refused_before_the_model_loads(view, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    argv = _argv(view, notes)
    argv[argv.index("--model") + 1] = str(tmp_path / "no-model")  # would fail to load: the check comes first
    assert main(argv) == 2
    line = _one_line(capsys)
    assert f"--out {notes} exists and is not a page attnlab view wrote" in line and "--force" in line
    assert notes.read_text() == "my notes" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_force_replaces_a_file_and_an_earlier_page_is_replaced_without_it(view, tmp_path, capsys):
    notes, page = tmp_path / "notes.txt", tmp_path / "old.html"
    notes.write_text("my notes")
    page.write_text(OLD_PAGE)
    assert main(_argv(view, notes, "--force")) == 0
    assert main(_argv(view, page)) == 0
    for f in (notes, page):
        assert page_data(f.read_text(encoding="utf-8"))["T"] == len("the cat sat")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "old.html"]  # no temporary left


def test_a_full_disk_is_one_line_and_the_old_page_stays_whole(view, tmp_path, capsys, monkeypatch):
    page = tmp_path / "view.html"
    page.write_text(OLD_PAGE)
    real = pathlib.Path.write_bytes

    def full(self, data):  # the disk fills half way through the page written aside
        if ".tmp-" not in self.name:
            return real(self, data)
        real(self, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    assert main(_argv(view, page)) == 2
    line = _one_line(capsys)
    assert f"--out {page}: cannot write there (no space left on device): free space there" in line, line
    assert page.read_text() == OLD_PAGE and sorted(p.name for p in tmp_path.iterdir()) == ["view.html"]


def test_a_folder_that_takes_no_file_is_refused_before_the_model_loads(view, tmp_path, capsys, monkeypatch):
    """Simulated (root writes anywhere; a read-only mount says EROFS the same way): the probe file fails."""
    page = tmp_path / "view.html"
    page.write_text(OLD_PAGE)

    def refuse(self, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "touch", refuse)
    argv = _argv(view, page)
    argv[argv.index("--model") + 1] = str(tmp_path / "no-model")
    assert main(argv) == 2
    assert f"--out {page}: cannot write there (permission denied): choose another --out" in _one_line(capsys)
    assert page.read_text() == OLD_PAGE


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_one_line(view, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert main(_argv(view, folder / "view.html")) == 2
        assert "cannot write there (permission denied)" in _one_line(capsys)
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)
