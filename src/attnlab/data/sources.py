"""Find a corpus by path or by its name in a data folder.

A corpus is named by a path (used as given) or by a relative name such as
``wikitext-2/valid.txt``, looked up, in order, under ``$ATTNLAB_DATA``, ``./data`` and
``../shared/data``, and last among the texts that ship with the package (:mod:`attnlab.data.embedded`:
Shakespeare, KJV, War and Peace, WikiText-2 valid/test). None of these folders has to exist; when nothing
is found the error names the setting that fixes it. ``hf:NAME[/CONFIG][:SPLIT]`` names a Hugging Face dataset, read
through :mod:`attnlab.data.hub` when the network allows; that module (and the ``datasets``
library) is imported only for such a spec, so importing :mod:`attnlab.data` stays light.

A file in another encoding than UTF-8 is named ``PATH:ENCODING`` (``notes.txt:latin-1``, any Python codec):
the encoding travels inside the corpus's name, so every way a text is given (``--text``, ``--text-file``,
``--train``, ``--set text=``, a sweep's ``--grid``, a config's tuple of texts) takes it with no option of its
own, and a run's config.json records it. A path that exists as written is never split.
"""
from __future__ import annotations

import codecs
import os
from pathlib import Path

from attnlab.core.errors import MissingResource, UsageError
from attnlab.data.corpus import DEFAULT_ENCODING, read_lines
from attnlab.data.embedded import embedded

DATA_ENV = "ATTNLAB_DATA"
HUB_PREFIX = "hf:"  # names a Hugging Face dataset


class CorpusNotFound(MissingResource):
    """No file or folder for a corpus name: the demo skips such experiments instead of failing."""


def data_roots() -> list[Path]:
    roots = [Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else []
    return roots + [Path("data"), Path("..") / "shared" / "data"]


def split_encoding(spec: str) -> tuple[str, str]:
    """``PATH:ENCODING`` -> (PATH, ENCODING); any other spec -> (spec, UTF-8). A tail after the last colon
    that names no text encoding, after a file that exists, is a UsageError (a misspelt encoding); a ``spec``
    that exists as written is never split."""
    head, sep, tail = spec.rpartition(":")
    if not (sep and head and tail) or "/" in tail or "\\" in tail or Path(spec).expanduser().exists():
        return spec, DEFAULT_ENCODING
    try:
        known = getattr(codecs.lookup(tail), "_is_text_encoding", True)  # base64, zlib: bytes to bytes
    except LookupError:
        known = False
    if known:
        return head, tail
    if Path(head).expanduser().exists():
        raise UsageError(f"{spec}: {tail!r} is no text encoding; name a file's encoding after its path as a "
                         "Python codec, e.g. notes.txt:latin-1 or notes.txt:cp1252")
    return spec, DEFAULT_ENCODING  # no such file either: locate says so


def locate(spec: str, key: str, fix: str | None = None) -> Path:
    """The path of corpus ``spec`` (less a ``:ENCODING``); the error names ``key`` and how to fix it (default
    ``--set key=PATH``)."""
    spec = split_encoding(spec)[0]
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if not path.is_absolute():
        for root in data_roots():
            if (root / spec).exists():
                return root / spec
        shipped = embedded(spec)
        if shipped is not None:
            return shipped
    raise CorpusNotFound(f"{key}={spec}: no such file, and not found under ${DATA_ENV}, ./data, ../shared/data "
                         "or among the texts that ship with attnlab; "
                         f"give a text file or folder with {fix or f'--set {key}=PATH'}")


def read_corpus(spec: str, key: str, fix: str | None = None) -> list[str]:
    """The lines of corpus ``spec``: a path, a name under the data folders (either with ``:ENCODING``), or
    ``hf:...``. ``fix``: how the user names it (``--text-file PATH``; default ``--set key=PATH``)."""
    if spec.startswith(HUB_PREFIX):
        from attnlab.data.hub import hub_lines  # only here: it is the one path to the datasets library

        return hub_lines(spec)
    path, encoding = split_encoding(spec)
    how = fix if fix and "PATH" in fix else f"--set {key}=PATH"
    return read_lines(locate(spec, key, fix), encoding=encoding, retry=how.replace("PATH", f"{path}:latin-1", 1))
