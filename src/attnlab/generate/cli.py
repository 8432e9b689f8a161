"""``attnlab generate``: continue a prompt with a causal LM, greedy or sampled, under any methods, eager or
through the compiled decode step (:mod:`attnlab.models.compiled`)."""
from __future__ import annotations

import argparse
import sys
import time

from attnlab.core.errors import UsageError

GROUP = "models"

DOC = """\
Continue a prompt with a causal LM, greedy or sampled: an alias (smollm2), a checkpoint folder (an
``attnlab train`` run's model/ folder, or any local Hugging Face model), a train run folder or a
hub id, as ``attnlab stream`` takes them.

With --method the model decodes under methods of any kind, one of each, composed as `attnlab stream`
composes them (`attnlab methods` lists them): a weight scheme (int8, w8a8x2, smoothquant), a RoPE scaling
(yarn:factor=2), a contextual-sparsity rule (cats:keep=0.5) and a KV-cache policy (h2o:budget=256), whose
evicting cache generation then runs through. The model is as it was once the command ends.
Speed goes to stderr, the prompt's forward and the decode steps apart (as llama.cpp's prompt eval and eval);
the text to stdout."""

EPILOG = """examples:
  attnlab generate --model smollm2 --prompt 'The capital of France is'
  attnlab generate --model smollm2 --prompt 'The capital of France is' --method int8 --compile cpp
  attnlab generate --model smollm2 --prompt 'Once upon a time' --max-new-tokens 300 --method h2o:budget=64
  attnlab generate --model smollm2 --prompt 'Once upon a time' --max-new-tokens 300 --method h2o:budget=64 --compile
  attnlab generate --model runs/llama/model --prompt 'ROMEO:' --temperature 0.8 --top-k 40 --seed 1

--compile decodes through a static cache that keeps every position and one graph compiled once: it takes
weight schemes, RoPE scalings but dynamic-ntk (its frequencies follow the length), sparsity rules at mode=mask
and the full cache. A KV-cache policy with a token budget decodes eager until its cache is full, then through
its steady step compiled once (one slot evicted a step); it refuses a budget that is a share of the stream, a
policy whose heads share a layer's budget (adakv) and a sparse MLP that gathers (a kept set of changing size),
in one line before the model loads. `attnlab stream --compile` follows the same rule."""


def add_commands(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt with a causal LM, under any methods",
                       description=DOC, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=cmd_generate)
    p.add_argument("--model", required=True, help="a Hugging Face causal-LM folder with its tokenizer (or an "
                   "alias such as smollm2, an attnlab train run folder, a hub id)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=60)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: sample")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                   help="a method the model decodes under (`attnlab methods` lists them); repeat it to compose "
                   "kinds, one of each: --method int8 --method h2o:budget=256")
    p.add_argument("--compile", nargs="?", const="python", metavar="WRAPPER",
                   help="greedy decode through a static cache with the step compiled once (torch.compile; needs a "
                   "C++ compiler): the same tokens, faster per token once compiled (tens of seconds for SmolLM2). "
                   "`--compile cpp` calls the step's kernels from C++, not Python: minutes more to compile once, "
                   "a faster step")


def check(args) -> list:
    """Every check that needs no model, before it loads (a mistake costs one line): the methods, in the stack's
    order."""
    from attnlab.methods import ordered, parse_list
    from attnlab.methods.base import refuse_uncompilable

    if args.max_new_tokens < 1 or args.temperature < 0 or args.top_k < 0:
        raise UsageError("--max-new-tokens must be >= 1, --temperature and --top-k >= 0")
    methods = ordered(parse_list(args.method))
    for m in methods:
        m.check()
    if args.compile:
        from attnlab.models.compiled import check_wrapper

        check_wrapper(args.compile, "--compile")
        if args.temperature > 0:
            raise UsageError("--compile decodes greedily: drop --temperature (or --compile)")
        refuse_uncompilable(methods)  # an evicting cache, a gathering sparse MLP, dynamic-ntk: one line
    return methods


class Clock:
    """The prompt's forward and the decode steps timed apart, as llama.cpp reports its prompt eval and eval: called
    once the prompt's forward is done (generate calls it as a logits processor, before its first token; the
    compiled step after its prefill), it keeps that time and leaves the scores as they are."""

    def __init__(self):
        self.start, self.prompted = time.perf_counter(), None

    def __call__(self, input_ids=None, scores=None):
        if self.prompted is None:
            self.prompted = time.perf_counter()
        return scores

    def restart(self) -> None:
        """Time from now (what came before, a compile, is not the prompt's)."""
        self.start, self.prompted = time.perf_counter(), None

    def report(self, prompt: int, new: int) -> str:
        """One line: the prompt's tokens/s, then the decode's (its new tokens after the first, which the prompt's
        forward gave)."""
        end = time.perf_counter()
        prompted = self.prompted or end

        def rate(what: str, n: int, seconds: float) -> str:
            return f"{what}: {n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s)"

        line = rate("prompt", prompt, prompted - self.start)
        return line + (f"; {rate('decode', new - 1, end - prompted)}" if new > 1 else "")


def _compiled_greedy(model, ids, max_new: int, wrapper: str, clock: Clock, kv=None):
    """ids (1, T) and the greedy continuation through attnlab.models.compiled (or, under ``kv``, an evicting KV
    method, attnlab.kv.steady), stopping where generate would at the model's end-of-sequence tokens: the compile
    happens first, on its own line, and ``clock`` starts after."""
    import torch

    from attnlab.models.compiled import CompiledDecode

    eos = model.generation_config.eos_token_id
    if kv is not None and kv.policy().needs_budget:  # an evicting cache (full keeps every position)
        from attnlab.kv.steady import CompiledPolicyDecode

        # the prompt in one forward, as generate's own prefill
        dec = CompiledPolicyDecode(model, kv.policy(), kv.positions, wrapper, chunk=ids.shape[1])
    else:
        dec = CompiledDecode(model, max_len=ids.shape[1] + max_new, wrapper=wrapper)
    print(f"compiled the decode step in {dec.warm(ids):.1f} s", file=sys.stderr)
    clock.restart()
    new = dec.greedy(ids, max_new, set([eos] if isinstance(eos, int) else eos or []), prompted=clock)
    return torch.cat([ids, new], dim=1)


def cmd_generate(args) -> int:
    import torch

    from attnlab.methods import Context, apply
    from attnlab.models.pretrained import load_model_and_tokenizer

    methods = check(args)
    model, tok = load_model_and_tokenizer(args.model)  # the one resolver: alias, folder, train run, hub id
    ids = tok(args.prompt, return_tensors="pt", add_special_tokens=False).input_ids  # (1, T)
    if ids.numel() == 0:
        raise UsageError("--prompt is empty after tokenisation; give some text")
    sample = args.temperature > 0
    # a calibrated method (smoothquant, a sparsity rule's thresholds) encodes its text with the tokenizer
    with apply(model, *methods, ctx=Context(tok, str(model.device), None, args.model)) as applied:
        if methods:
            print(f"under {applied.spec()}", file=sys.stderr)
        torch.manual_seed(args.seed)
        clock = Clock()
        if args.compile:
            kv = next((m for m in methods if m.kind == "kv"), None)
            out = _compiled_greedy(model, ids, args.max_new_tokens, args.compile, clock, kv)
        else:  # a KV method's evicting cache is generate's own (attnlab.kv.methods)
            out = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=sample,
                                 temperature=args.temperature if sample else None, top_k=args.top_k or None,
                                 top_p=None, pad_token_id=tok.eos_token_id, logits_processor=[clock])
        print(clock.report(ids.shape[1], out.shape[1] - ids.shape[1]), file=sys.stderr)
    sys.stdout.write(tok.decode(out[0].tolist()) + "\n")
    return 0
