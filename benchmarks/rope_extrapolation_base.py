"""Does a small Llama trained at a short context fail to extrapolate? The first step of issue 38's item 1 (a PI
fine-tuning miniature where direct extrapolation fails first, as in Chen et al. 2023, where it exceeds 10³ PPL).

Trains the ``pi-finetune`` architecture (4 layers, d = 128, RoPE θ = 10,000, BPE 4,096) at ``--short`` tokens on a
text with a held-out tail (the last 10%), then evaluates it with no scaling and no fine-tuning on windows of 1, 2,
4 and 8 times ``--short`` (the same held-out tail, 16 batches of 4 windows each): the perplexity of direct
extrapolation, and its ratio to the perplexity inside the trained window.

    python benchmarks/rope_extrapolation_base.py --out benchmarks/results/rope-extrapolation-base   # ~11 min
"""
from __future__ import annotations

import math
import tempfile
import time

import torch

from attnlab.data.corpus import split_tail
from attnlab.data.sources import read_corpus
from attnlab.models.causal_lm import LlamaLMConfig, build_llama
from attnlab.models.tokenizer import make_tokenizer
from attnlab.train.trainer import TrainConfig, Trainer

from host import add_out, corpus, number, parser, positive, positive_int, recorded  # benchmarks/host.py


def trainer(model, train_ids, valid_ids, bptt: int, steps: int, batch: int, lr: float) -> Trainer:
    cfg = TrainConfig(optimizer="adam", lr=lr, clip=1.0, batching="random", batch_size=batch, bptt=bptt, steps=steps,
                      track_every=max(steps // 4, 1), eval_every=max(steps // 4, 1), eval_batches=16,
                      checkpoint_every=max(steps, 1), seed=0)
    return Trainer(model, train_ids, valid_ids, cfg, tempfile.mkdtemp(), "cpu")


def main(argv=None) -> None:
    p = parser(__doc__)
    p.add_argument("--text", type=corpus(), default="war-and-peace")
    p.add_argument("--short", type=number(int, ">= 2"), default=64, help="the trained window (tokens)")
    p.add_argument("--steps", type=positive_int, default=4000)
    p.add_argument("--batch", type=positive_int, default=32)
    p.add_argument("--lr", type=positive, default=1e-3)
    p.add_argument("--theta", type=number(float, "> 1"), default=10000.0, help="RoPE's base")
    add_out(p)
    args = p.parse_args(argv)
    figures: dict = {}
    with recorded(args.out, figures):
        train_lines, valid_lines = split_tail(read_corpus(args.text, "text"), 0.1)
        tok = make_tokenizer("bpe", train_lines, 4096)
        train_ids, valid_ids = tok.encode_lines(train_lines), tok.encode_lines(valid_lines)
        torch.manual_seed(0)
        model = build_llama(LlamaLMConfig(tok.vocab_size, 128, 4, 4, 2, 384, args.short, rope_theta=args.theta))
        t0 = time.perf_counter()
        lines = trainer(model, train_ids, valid_ids, args.short, args.steps, args.batch, args.lr).fit(
            show_progress=False)
        curve = [(ln["step"], round(math.exp(ln["valid_loss"]), 1)) for ln in lines if "valid_loss" in ln]
        ppl = {}
        for k in (1, 2, 4, 8):  # no scaling, no fine-tuning: direct extrapolation
            ppl[k] = math.exp(trainer(model, train_ids, valid_ids, k * args.short, 0, 4, args.lr).evaluate())
        figures.update(text=args.text, short=args.short, steps=args.steps, theta=args.theta,
                       train_seconds=round(time.perf_counter() - t0, 1), valid_curve=curve,
                       ppl={str(k * args.short): round(v, 1) for k, v in ppl.items()},
                       ratio={str(k * args.short): round(v / ppl[1], 2) for k, v in ppl.items()})
        print(f"{args.steps} steps at {args.short} tokens of {args.text} (held-out tail 10%); validation PPL along "
              f"training {curve}\n")
        print("| window | × trained | PPL, direct extrapolation | over the trained window |\n|---:|---:|---:|---:|")
        for k, v in ppl.items():
            print(f"| {k * args.short} | {k} | {v:.1f} | {v / ppl[1]:.2f} |")


if __name__ == "__main__":
    main()
