"""Pretrained causal LMs by name: a tiny registry, what is in the cache, and one resolver and loader.

The one pretrained model attnlab knows by name, SmolLM2-135M-Instruct (a Llama: 30 layers, 9 query
heads sharing 3 key/value heads, RoPE, 8k context), is fetched and converted once by
:mod:`attnlab.models.fetch` into ``cache_dir("models", "smollm2-135m-instruct")`` (a float32
safetensors folder, either absent or complete). Later loads read the safetensors file directly, in
about a second.

``resolve_model(name)`` turns what a user types into something ``from_pretrained`` loads: a known
alias (its cached folder), a local Hugging Face model folder, an ``attnlab train`` run folder (its
``model/``), or else a hub id ``owner/name`` (returned as a string; loading it needs the network).
"""
from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import torch

from attnlab.core.cache import offline
from attnlab.core.errors import MissingResource, UsageError, first_line
from attnlab.models.known import (  # noqa: F401 -- the loader's names, as its callers import them
    KNOWN,
    CachedModel,
    KnownModel,
    cached_models,
    folder_size,
    known,
    model_path,
    param_count,
)

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
            _fetch_on_first_use(name, path)
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


def _fetch_on_first_use(alias: str, path: Path) -> None:
    """Fetch a known model the first time a command needs it (the `attnlab models fetch` path: nothing half
    written is left in the cache); refused with the command to run when downloads are off."""
    if offline():
        raise UsageError(f"model {alias} is not in the cache and downloads are off (--offline or $ATTNLAB_OFFLINE): "
                         f"run `attnlab models fetch {alias}` once when online (~100 MB; it goes to {path})")
    print(f"[attnlab] {alias} is not in the cache: fetching it once (a ~100 MB download, ~540 MB as float32) "
          f"into {path}", file=sys.stderr, flush=True)
    from attnlab.models.fetch import fetch  # here: transformers' GGUF path only when a fetch is needed

    fetch(alias)


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


def _offline_hub_id(hub_id: str) -> bool:
    """Whether downloads are off for the hub id ``hub_id``: then it loads from Hugging Face's cache alone
    (``local_files_only``: no request at all), and one not in that cache is refused here, at once, rather than
    after the ~30 s transformers spends retrying a network that is off."""
    if not offline():
        return False
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(hub_id, "config.json"), str):  # a path when cached; reads no network
        raise MissingResource(f"model {hub_id}: a hub id not in the Hugging Face cache, and downloads are off "
                              "(--offline or $ATTNLAB_OFFLINE): give a local model folder, or load it once online")
    return True


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
    local = _offline_hub_id(target)
    hub_log = logging.getLogger("huggingface_hub")
    level, hub_log.level = hub_log.level, logging.ERROR  # its retry warnings would precede our one line
    try:  # a hub id: transformers downloads it (or finds it in its own cache)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, local_files_only=local)
        tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=local)
    except Exception as e:  # noqa: BLE001 - network, auth and format errors surface as many types
        raise UsageError(f"model {target}: no such local folder, and loading it as a hub id failed "
                         f"({first_line(e)}); give a local folder or an alias such as smollm2") from None
    finally:
        hub_log.setLevel(level)
    return model.eval(), tokenizer
