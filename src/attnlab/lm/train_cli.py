"""``attnlab train``: the tracking trainer on your own corpus, into a run folder.

The folder gets config.json, vocab.txt, metrics.jsonl (one line per tracked step) and
checkpoint.pt; ``--resume`` continues a run that was stopped (or extends a finished one to a
larger ``--steps``), and refuses a folder written with other settings. Nothing in an existing folder is touched before the input is checked.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnlab.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train the tutorial transformer on a text corpus, tracking attention entropy as it learns",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  attnlab train --train wikitext-2/valid.txt --valid wikitext-2/test.txt --out runs/lm1 --steps 2000\n"
        "  attnlab train --train my_corpus/ --out runs/lm5 --layers 5 --optimizer adam --lr 1e-4 --dropout 0.2\n"
        "  attnlab train --train my.txt --out runs/lm1 --group-lr 'layers.0.linear*=10' --resume\n"
        "Corpus names like wikitext-2/valid.txt are looked up under $ATTNLAB_DATA, ./data and ../shared/data.",
    )
    p.add_argument("--train", required=True, help="training text: a file, a folder of *.txt, or a corpus name")
    p.add_argument("--valid", help="validation text (default: none, no validation loss)")
    p.add_argument("--out", required=True, type=Path, help="run folder")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    m = p.add_argument_group("model (the PyTorch tutorial transformer, post-LN)")
    m.add_argument("--layers", type=int, default=1)
    m.add_argument("--heads", type=int, default=1)
    m.add_argument("--d-model", type=int, default=200)
    m.add_argument("--d-ffn", type=int, default=200)
    m.add_argument("--dropout", type=float, default=0.2)
    m.add_argument("--max-vocab", type=int, help="vocabulary size limit, <unk> included (default: no limit)")
    t = p.add_argument_group("training")
    t.add_argument("--optimizer", default="sgd", help="sgd or adam (default sgd)")
    t.add_argument("--lr", type=float, default=5.0)
    t.add_argument("--group-lr", action="append", default=[], metavar="GLOB=LR",
                   help="learning rate for parameters whose name matches GLOB (repeatable)")
    t.add_argument("--clip", type=float, default=0.5, help="max gradient norm (0: off)")
    t.add_argument("--batching", default="bptt", help="bptt (the tutorial's 20 streams) or random windows")
    t.add_argument("--batch-size", type=int, default=20)
    t.add_argument("--bptt", type=int, default=35, help="sequence length")
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--track-every", type=int, default=100)
    t.add_argument("--eval-every", type=int, default=500)
    t.add_argument("--snapshot-steps", default="", help="comma-separated steps to keep attention maps at")
    t.add_argument("--checkpoint-every", type=int, default=500)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default="cpu")


def cmd_train(args) -> int:
    import torch

    from attnlab.experiments.runner import check_device
    from attnlab.lm.trainer import TrainConfig, Trainer
    from attnlab.lm.tutorial import TutorialConfig, TutorialTransformer
    from attnlab.text.corpus import read_lines
    from attnlab.text.sources import locate
    from attnlab.text.vocab import Vocab, basic_english

    device = check_device(args.device)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder")
    if not args.resume and (out / "metrics.jsonl").exists():
        raise UsageError(f"--out {out} already holds a run: add --resume to continue it, or pick another folder")
    try:
        snaps = tuple(int(s) for s in args.snapshot_steps.split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--snapshot-steps {args.snapshot_steps!r}: give comma-separated integers") from None
    cfg = TrainConfig(optimizer=args.optimizer, lr=args.lr, group_lrs=tuple(args.group_lr), clip=args.clip,
                      batching=args.batching, batch_size=args.batch_size, bptt=args.bptt, steps=args.steps,
                      track_every=args.track_every, eval_every=args.eval_every, snapshot_steps=snaps,
                      checkpoint_every=args.checkpoint_every, seed=args.seed)
    train_lines = read_lines(locate(args.train, "--train", "--train PATH"))
    valid_lines = read_lines(locate(args.valid, "--valid", "--valid PATH")) if args.valid else None
    vocab = Vocab.build((basic_english(line) for line in train_lines), max_size=args.max_vocab)
    torch.manual_seed(args.seed)
    model = TutorialTransformer(TutorialConfig(len(vocab), args.d_model, args.heads, args.d_ffn, args.layers,
                                               args.dropout))
    trainer = Trainer(model, vocab.numericalize(train_lines),
                      None if valid_lines is None else vocab.numericalize(valid_lines), cfg, out, device)
    if args.resume and not (out / "checkpoint.pt").is_file():
        raise UsageError(f"--resume: {out} has no checkpoint.pt; start without --resume")
    if not args.resume:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                                     for k, v in vars(args).items() if k != "func"}, indent=2) + "\n")
        (out / "vocab.txt").write_text("\n".join(vocab.itos) + "\n")
    lines = trainer.fit(resume=args.resume)
    last = lines[-1]
    valid = f", valid loss {last['valid_loss']:.3f}" if "valid_loss" in last else ""
    print(f"attnlab train: {last['step']} steps, train loss {last['train_loss']:.3f}{valid}; "
          f"layer entropies {[round(sum(h) / len(h), 3) for h in last['entropy']]}; run: {out}/metrics.jsonl")
    return 0
