"""The texts that ship inside the package, so a fresh install runs every real-text experiment.

Tiny Shakespeare, the King James Bible and War and Peace (public domain), WikiText-2's validation and
test splits (CC BY-SA 3.0) and the zero-shot task sets under ``eval/`` (COPA, PIQA, ARC, ..., each under its
own licence; all attributed in ``texts/NOTICE.md``) are stored xz-compressed under ``texts/`` (4.6 MB for
17.5 MB), named as in a data folder (``kjv/kjv.txt``, ``wikitext-2/valid.txt``, ``eval/copa.jsonl``).
They are the last place :func:`attnlab.data.sources.locate` looks: a user's path, ``$ATTNLAB_DATA`` and
``./data`` come first. On first use a text is unpacked once into the cache (``cache_dir("texts")``),
checked against the SHA-256 in ``texts/texts.json`` and renamed into place, so the readers, which take
plain files and folders, need no change and a killed unpacking leaves no half file.
"""
from __future__ import annotations

import hashlib
import json
import lzma
from functools import cache
from pathlib import Path

from attnlab.core.cache import cache_dir
from attnlab.core.errors import MissingResource
from attnlab.core.io import write_atomic

TEXTS = Path(__file__).parent / "texts"


@cache
def manifest() -> dict[str, dict]:
    """Each embedded text's name (``kjv/kjv.txt``) -> its sha256, bytes, licence and what it is."""
    return json.loads((TEXTS / "texts.json").read_text())


def names_under(spec: str) -> list[str]:
    """The embedded texts that ``spec`` names: one file (``kjv/kjv.txt``) or a folder (``kjv``)."""
    spec = spec.strip().strip("/")
    return [name for name in manifest() if spec and (name == spec or name.startswith(spec + "/"))]


def embedded(spec: str) -> Path | None:
    """The unpacked path (file or folder) of the embedded text(s) ``spec`` names, or None if it names none."""
    names = names_under(spec)
    for name in names:
        unpack(name)
    return cache_dir("texts", *spec.strip().strip("/").split("/")) if names else None


def unpack(name: str) -> Path:
    """The embedded text ``name`` as a plain file in the cache, unpacked and checked on first use."""
    entry = manifest()[name]
    target = cache_dir("texts", *name.split("/"))
    if target.is_file() and target.stat().st_size == entry["bytes"]:
        return target
    raw = lzma.decompress((TEXTS / f"{name}.xz").read_bytes())
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:  # a damaged install, not the user's input
        raise MissingResource(f"the embedded text {name} is damaged (its SHA-256 differs from texts.json); "
                              "reinstall attnlab, or give the text with --set text=PATH or $ATTNLAB_DATA")
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, raw)
