"""Training throughput: attnlab's tracking Trainer vs a minimal plain-PyTorch loop, same model and batches.

    python benchmarks/bench_trainer_throughput.py --train wikitext-2/valid.txt --layers 1,5 --steps 300 --repeats 3

Both run the tutorial transformer (emsize 200, FFN 200, 1 head, dropout 0.2) with SGD lr 5, clip 0.5,
on the tutorial's bptt batches (20 x 35). The Trainer tracks attention entropy every 100 steps (a probe
forward pass) and writes metrics.jsonl and one checkpoint at the end; the plain loop does nothing else.
Runs alternate (plain, trainer, plain, ...) so drift on a shared machine hits both; medians are quoted.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time

import torch
from torch import nn

from attnlab.data.corpus import read_lines
from attnlab.data.sources import locate
from attnlab.data.vocab import Vocab, basic_english
from attnlab.train.batching import batchify
from attnlab.train.trainer import TrainConfig, Trainer
from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

from host import add_out, corpus, device, parser, positive_int, positive_ints, recorded  # benchmarks/host.py


def plain_loop(model, src, steps, bptt, device) -> float:
    """The tutorial's loop, nothing else. Returns tokens/s."""
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    model.train()
    n_batches = (src.shape[0] - 2) // bptt + 1
    t0, tokens = time.perf_counter(), 0
    for step in range(steps):
        i = (step % n_batches) * bptt
        t = min(bptt, src.shape[0] - 1 - i)
        x, y = src[i : i + t].t().to(device), src[i + 1 : i + 1 + t].t().to(device)
        logits, _ = model(x)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        tokens += y.numel()
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - t0)


def trainer_run(model, ids, steps, device) -> float:
    cfg = TrainConfig(lr=5.0, steps=steps, track_every=100, checkpoint_every=steps)
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(model, ids, None, cfg, tmp, device)
        t0 = time.perf_counter()
        tr.fit(show_progress=False)
        if device == "cuda":
            torch.cuda.synchronize()
        return steps * cfg.batch_size * cfg.bptt / (time.perf_counter() - t0)


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--train", type=corpus("--train"), default="wikitext-2/valid.txt")
    p.add_argument("--layers", type=positive_ints, default="1,5")
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--device", type=device, default="cpu")
    add_out(p)
    args = p.parse_args(argv)
    with recorded(args.out):
        return run(args)


def run(args) -> int:
    """The benchmark itself; what it prints is kept with --out."""
    lines = read_lines(locate(args.train, "--train", "--train PATH"))
    vocab = Vocab.build(basic_english(line) for line in lines)
    ids = vocab.numericalize(lines)
    src = batchify(ids, 20)
    print(f"# {args.train}: {ids.numel():,} tokens, vocab {len(vocab):,}; {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, device {args.device}", file=sys.stderr)
    print("| layers | plain loop tok/s (median) | attnlab Trainer tok/s (median) | ratio | runs |\n"
          "|---|---|---|---|---|")
    for n_layers in args.layers:
        plain, ours = [], []
        for r in range(args.repeats):
            for kind in ("plain", "trainer"):
                torch.manual_seed(r)
                model = TutorialTransformer(TutorialConfig(len(vocab), n_layers=n_layers)).to(args.device)
                if kind == "plain":
                    plain.append(plain_loop(model, src, args.steps, 35, args.device))
                else:
                    ours.append(trainer_run(model, ids, args.steps, args.device))
        mp, mo = statistics.median(plain), statistics.median(ours)
        print(f"| {n_layers} | {mp:,.0f} | {mo:,.0f} | {mo / mp:.3f} | {args.repeats} x {args.steps} steps each |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
