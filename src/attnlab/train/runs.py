"""What the real-text experiments share: WikiText-style word-level data and one training run
of the tutorial transformer per depth, each in its own sub-folder of the experiment's output."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError
from attnlab.data.sources import read_corpus
from attnlab.data.vocab import Vocab, basic_english
from attnlab.train.trainer import TrainConfig, Trainer
from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

Runs = dict[int, tuple[list[dict], dict]]  # depth -> (metrics lines, attention snapshots)


@dataclass(frozen=True)
class WordLevelConfig:
    """What the real-text experiments (``scansnap-fig7``, ``joma-wikitext``) share: word-level data
    and tutorial transformers of several depths; each sets its own defaults and training."""

    train: str = "wikitext-2/valid.txt"  # stands in for the unavailable train split
    valid: str = "wikitext-2/test.txt"
    max_vocab: int = 0  # 0: every training word type
    layers: tuple[int, ...] = (1, 3)
    dropout: float = 0.3
    lr: float = 5.0

    def __post_init__(self):
        if not self.layers or min(self.layers) < 1:
            example = ",".join(map(str, type(self).layers))  # the experiment's own default
            raise ConfigError(f"layers={self.layers}: give layer counts >= 1, e.g. layers={example}")
        if self.max_vocab < 0:
            raise ConfigError(f"max_vocab={self.max_vocab}: use 0 (no limit) or a positive size")


def setup_text(tcfg: TrainConfig) -> str:
    """The training setup the report names, from the TrainConfig the runs used."""
    return f"clip {tcfg.clip:g}, batch {tcfg.batch_size} x bptt {tcfg.bptt}"



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


def train_and_save(model, tok, train_ids: torch.Tensor, cfg: TrainConfig, run_dir, model_dir, device: str,
                   show_progress: bool, desc: str) -> list[dict]:
    """Train ``model`` (a CausalLM) on ``train_ids`` with the Trainer into ``run_dir``, then keep the model alone:
    its checkpoint removed, the model saved with ``tok`` as a Hugging Face folder in ``model_dir`` (what
    ``attnlab sparsity --model`` and ``eval`` read). -> the Trainer's track."""
    lines = Trainer(model, train_ids, None, cfg, run_dir, device).fit(show_progress=show_progress, desc=desc)
    (run_dir / "checkpoint.pt").unlink()
    model.save_pretrained(model_dir, tok)
    return lines
