"""Where attnlab keeps what it builds once and reuses: trained tokenizers, converted models.

``$ATTNLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab``. What is not there
yet is fetched on first use (a known model) unless ``$ATTNLAB_OFFLINE`` is set (``--offline`` sets it).
"""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "ATTNLAB_CACHE"
OFFLINE_ENV = "ATTNLAB_OFFLINE"  # 1: never download; what needs a download is skipped (demo) or refused


def cache_dir(*parts: str) -> Path:
    """The cache folder (or a sub-folder of it); not created here."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV])
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab"
    return root.joinpath(*parts)


def offline() -> bool:
    """True when downloads are off: ``$ATTNLAB_OFFLINE`` set to anything but empty, 0, false or no."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


OFFLINE_HELP = ("never download: an experiment that needs a model not yet in the cache is skipped (demo) or "
                "refused, naming `attnlab models fetch`; the same as ATTNLAB_OFFLINE=1")


def go_offline() -> None:
    """Downloads off for this process and the workers it starts (``--offline``)."""
    os.environ[OFFLINE_ENV] = "1"
