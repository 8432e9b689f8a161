"""Corpora as lists of lines, from a text file or a folder of them.

Code never assumes ``../shared`` exists: every path is given.

WikiText files (v1 tokenized, e.g. ``wikitext-2/valid.txt``) already mark rare words as
``<unk>`` and split hyphens as `` @-@ ``; they are read as they are, line by line, exactly as
the PyTorch word-language-model tutorial reads them. A folder is read file by file in sorted
order (``*.txt`` by default), so the same folder always gives the same corpus.
"""
from __future__ import annotations

from pathlib import Path

from attnlab.core.errors import UsageError


def read_lines(path: str | Path, pattern: str = "*.txt") -> list[str]:
    """The lines of a text file, or of every file matching ``pattern`` in a folder (sorted)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob(pattern) if p.is_file())
        if not files:
            raise UsageError(f"{path}: the folder holds no {pattern} files; give a text file or a folder of them")
    elif path.is_file():
        files = [path]
    else:
        raise UsageError(f"{path}: no such file or folder; give the path of a text corpus")
    lines: list[str] = []
    for f in files:
        try:
            lines += f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            raise UsageError(f"{f}: cannot read it ({e.strerror})") from None
    if not any(line.strip() for line in lines):
        raise UsageError(f"{path}: the corpus is empty (no non-blank line); give a file with text in it")
    return lines


def split_tail(lines: list[str], holdout: float) -> tuple[list[str], list[str]]:
    """(the first lines, the last ``holdout`` share of them): a contiguous held-out tail, the same every time."""
    cut = round(len(lines) * (1 - holdout))
    return lines[:cut], lines[cut:]
