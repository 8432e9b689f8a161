"""What the real-text experiments share: WikiText-style word-level data and one training run
of the tutorial transformer per depth, each in its own sub-folder of the experiment's output."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.data.sources import read_corpus
from attnlab.data.vocab import Vocab, basic_english
from attnlab.train.trainer import TrainConfig, Trainer
from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

Runs = dict[int, tuple[list[dict], dict]]  # depth -> (metrics lines, attention snapshots)


def load_wordlevel(train: str, valid: str, max_vocab: int):
    """(vocab, train ids, valid ids) with the basic_english scheme, vocabulary from ``train``."""
    train_lines = read_corpus(train, "train")
    valid_lines = read_corpus(valid, "valid")
    vocab = Vocab.build((basic_english(line) for line in train_lines), max_size=max_vocab or None)
    return vocab, vocab.numericalize(train_lines), vocab.numericalize(valid_lines)


def data_summary(train: str, valid: str, vocab, train_ids, valid_ids) -> str:
    """The report's first sentence: which text, how many tokens, which vocabulary."""
    return (f"Trained on {train} ({train_ids.numel():,} tokens, vocabulary {len(vocab):,}), evaluated on "
            f"{valid} ({valid_ids.numel():,} tokens)")


def train_depths(layers, vocab_size: int, dropout: float, tcfg: TrainConfig, train_ids, valid_ids, ctx,
                 seed: int) -> Runs:
    """Train one tutorial transformer per depth (same seed each) -> {depth: (metrics lines, snapshots)}.

    Checkpoints (~20 MB each) are deleted after the run: the figures need only the metrics."""
    runs = {}
    for n_layers in layers:
        torch.manual_seed(seed)
        model = TutorialTransformer(TutorialConfig(vocab_size, n_layers=n_layers, dropout=dropout))
        run_dir = ctx.out / f"layers{n_layers}"
        trainer = Trainer(model, train_ids, valid_ids, tcfg, run_dir, ctx.device)
        lines = trainer.fit(show_progress=ctx.show_progress, desc=f"{n_layers}-layer")
        (run_dir / "checkpoint.pt").unlink()
        runs[n_layers] = (lines, trainer.snapshots)
    return runs


@dataclass(frozen=True)
class DepthSweep:
    runs: Runs
    about: str  # the report's first sentence (data_summary)
    train_tokens: int


def sweep_depths(cfg, tcfg: TrainConfig, ctx) -> DepthSweep:
    """A real-text experiment's runs: ``cfg.train``/``cfg.valid`` read word-level (vocabulary limit
    ``cfg.max_vocab``), then one model per depth in ``cfg.layers`` (``cfg.dropout``, ``cfg.seed``)."""
    vocab, train_ids, valid_ids = load_wordlevel(cfg.train, cfg.valid, cfg.max_vocab)
    runs = train_depths(cfg.layers, len(vocab), cfg.dropout, tcfg, train_ids, valid_ids, ctx, cfg.seed)
    return DepthSweep(runs, data_summary(cfg.train, cfg.valid, vocab, train_ids, valid_ids), train_ids.numel())
