"""Find a corpus by path or by its name in a data folder.

A corpus is named by a path (used as given) or by a relative name such as
``wikitext-2/valid.txt``, looked up, in order, under ``$ATTNLAB_DATA``, ``./data`` and
``../shared/data``, and last among the texts that ship with the package (:mod:`attnlab.data.embedded`:
Shakespeare, KJV, War and Peace, WikiText-2 valid/test). None of these folders has to exist; when nothing
is found the error names the setting that fixes it. ``hf:NAME[/CONFIG][:SPLIT]`` names a Hugging Face dataset, read
through :mod:`attnlab.data.hub` when the network allows; that module (and the ``datasets``
library) is imported only for such a spec, so importing :mod:`attnlab.data` stays light.
"""
from __future__ import annotations

import os
from pathlib import Path

from attnlab.core.errors import MissingResource
from attnlab.data.corpus import read_lines
from attnlab.data.embedded import embedded

DATA_ENV = "ATTNLAB_DATA"
HUB_PREFIX = "hf:"  # names a Hugging Face dataset


class CorpusNotFound(MissingResource):
    """No file or folder for a corpus name: the demo skips such experiments instead of failing."""


def data_roots() -> list[Path]:
    roots = [Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else []
    return roots + [Path("data"), Path("..") / "shared" / "data"]


def locate(spec: str, key: str, fix: str | None = None) -> Path:
    """The path of corpus ``spec``; the error names ``key`` and how to fix it (default ``--set key=PATH``)."""
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
    """The lines of corpus ``spec``: a path, a name under the data folders, or ``hf:...``."""
    if spec.startswith(HUB_PREFIX):
        from attnlab.data.hub import hub_lines  # only here: it is the one path to the datasets library

        return hub_lines(spec)
    return read_lines(locate(spec, key, fix))
