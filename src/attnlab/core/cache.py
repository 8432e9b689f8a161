"""Where attnlab keeps what it builds once and reuses: trained tokenizers, converted models.

``$ATTNLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab``.
"""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "ATTNLAB_CACHE"


def cache_dir(*parts: str) -> Path:
    """The cache folder (or a sub-folder of it); not created here."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV])
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab"
    return root.joinpath(*parts)
