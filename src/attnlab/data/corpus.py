"""Corpora as lists of lines, from a text file or a folder of them.

Code never assumes ``../shared`` exists: every path is given.

WikiText files (v1 tokenized, e.g. ``wikitext-2/valid.txt``) already mark rare words as
``<unk>`` and split hyphens as `` @-@ ``; they are read as they are, line by line, exactly as
the PyTorch word-language-model tutorial reads them. A folder is read file by file in sorted
order (``*.txt`` by default), so the same folder always gives the same corpus.

Files are decoded as ``encoding`` (UTF-8 unless the corpus is named ``PATH:ENCODING``, see
:mod:`attnlab.data.sources`), never silently: a binary file is refused, and so is a file of which more than
:data:`REPLACED_LIMIT` does not decode (text in another encoding); a few such characters become U+FFFD and
are counted on stderr.
"""
from __future__ import annotations

import codecs
import sys
from pathlib import Path

from attnlab.core.errors import UsageError

DEFAULT_ENCODING = "utf-8"
REPLACED_LIMIT = 0.001  # a stray byte or two is damage; more is a file in another encoding, or no text at all
_MARK = "\udfff"  # a lone surrogate, which no decoder yields for valid input: one per character replaced
codecs.register_error("attnlab.count", lambda e: (_MARK, e.end))


def decode(name: Path, raw: bytes, encoding: str = DEFAULT_ENCODING, retry: str | None = None) -> str:
    """``raw`` (the file ``name``) decoded. A UsageError for a binary file (a NUL in its first KB) or one of
    which more than :data:`REPLACED_LIMIT` of the characters do not decode, naming ``retry`` (how the user gives
    the encoding; default ``NAME:latin-1``); fewer are read as U+FFFD, and said on stderr."""
    text = raw.decode(encoding, "attnlab.count")
    if "\0" in text[:1024]:
        raise UsageError(f"{name}: a binary file (a NUL byte in its first KB), not text; give a text file")
    replaced = text.count(_MARK)
    if not replaced:
        return text
    share = replaced / len(text)
    if share > REPLACED_LIMIT:
        raise UsageError(f"{name}: {share:.2%} of its characters ({replaced:,}) are not {encoding}; if it is text "
                         f"in another encoding, name it after the path, e.g. {retry or f'{name}:latin-1'}")
    print(f"{name}: {replaced:,} character(s) ({share:.3%}) are not {encoding}: read as U+FFFD", file=sys.stderr)
    return text.replace(_MARK, "\ufffd")


def read_lines(path: str | Path, pattern: str = "*.txt", encoding: str = DEFAULT_ENCODING,
               retry: str | None = None) -> list[str]:
    """The lines of a text file, or of every file matching ``pattern`` in a folder (sorted), decoded as
    ``encoding`` (:func:`decode`; ``retry``: how the user names the encoding, for its error)."""
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
            raw = f.read_bytes()
        except OSError as e:
            raise UsageError(f"{f}: cannot read it ({e.strerror})") from None
        lines += decode(f, raw, encoding, retry).splitlines()
    if not any(line.strip() for line in lines):
        raise UsageError(f"{path}: the corpus is empty (no non-blank line); give a file with text in it")
    return lines


def split_tail(lines: list[str], holdout: float) -> tuple[list[str], list[str]]:
    """(the first lines, the last ``holdout`` share of them): a contiguous held-out tail, the same every time."""
    cut = round(len(lines) * (1 - holdout))
    return lines[:cut], lines[cut:]
