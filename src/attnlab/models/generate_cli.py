"""``attnlab generate``: continue a prompt with a causal-LM checkpoint folder (an ``attnlab train``
run's model/ folder, or any local Hugging Face model), greedy or sampled."""
from __future__ import annotations

import argparse
import sys

from attnlab.core.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate", help="continue a prompt with a causal-LM checkpoint folder",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  attnlab generate --model runs/llama/model --prompt 'ROMEO:' --max-new-tokens 80\n"
        "  attnlab generate --model runs/llama/model --prompt 'ROMEO:' --temperature 0.8 --top-k 40 --seed 1")
    p.add_argument("--model", required=True, help="a Hugging Face causal-LM folder with its tokenizer")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=60)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); > 0: sample")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0: all)")
    p.add_argument("--seed", type=int, default=0)


def cmd_generate(args) -> int:
    import torch

    from attnlab.models.causal_lm import load_causal_lm
    from attnlab.models.tokenizer import load_tokenizer

    if args.max_new_tokens < 1 or args.temperature < 0 or args.top_k < 0:
        raise UsageError("--max-new-tokens must be >= 1, --temperature and --top-k >= 0")
    model = load_causal_lm(args.model).eval()
    tok = load_tokenizer(args.model)
    ids = tok.fast(args.prompt, return_tensors="pt", add_special_tokens=False).input_ids  # (1, T)
    if ids.numel() == 0:
        raise UsageError("--prompt is empty after tokenisation; give some text")
    torch.manual_seed(args.seed)
    sample = args.temperature > 0
    out = model.hf.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=sample,
                            temperature=args.temperature if sample else None, top_k=args.top_k or None,
                            top_p=None, pad_token_id=tok.eos_id)
    sys.stdout.write(tok.decode(out[0].tolist()) + "\n")
    return 0
