"""Pre-train the same small Llama once per attention variant: same text, tokenizer, seed, data order,
steps and size; only the attention differs (the variants: :mod:`attnlab.core.variant_names`).

Training windows are drawn at random offsets of the text, so they start all over it (never all with
one token, which would become a sink by accident); the sink-token variant alone gets its token in
front of every window (:class:`attnlab.train.batching.PrependSink`). Every variant shares one
vocabulary, the sink entry included, so the embeddings are the same size. The trainer's probe records,
every ``track_every`` steps, the first-token share per layer, Gu et al.'s sink rate Sink_k^0.3 and the
hidden-state norm at position 0 over the others (``metrics.jsonl`` in each variant's folder).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import sink_importance, sink_rate, sink_share
from attnlab.core.workers import in_processes
from attnlab.data.sources import read_corpus
from attnlab.models.causal_lm import CausalLM, LlamaLMConfig, build_llama
from attnlab.models.tokenizer import make_tokenizer
from attnlab.sinks.table import sink_table
from attnlab.train.batching import prepend
from attnlab.train.trainer import TrainConfig, Trainer


@dataclass(frozen=True)
class PretrainSetup:
    """What every sinks-from-scratch run shares: the text, the model, the training and the measurements."""

    text: str = "war-and-peace"
    holdout: float = 0.05  # the text's last lines: streaming and the held-out sink metrics
    vocab_size: int = 2048
    d_model: int = 64
    layers: int = 4
    heads: int = 4
    d_ffn: int = 256
    context: int = 256  # training windows
    batch_size: int = 16
    steps: int = 500
    lr: float = 6e-3  # Gu et al.'s levers: a higher rate and weight decay make sinks emerge sooner
    weight_decay: float = 0.5
    track_every: int = 50
    eval_batches: int = 20
    window: int = 128  # the cache W: n sinks + (W - n) recent
    sinks: tuple[int, ...] = ()  # caches n + (W - n) to stream the held-out text through (none: no stream)
    stream_tokens: int = 2048
    probe_sequences: int = 100  # Gu et al.: 100 sequences of 64 tokens
    probe_length: int = 64
    keep_models: bool = True
    workers: int = 2  # runs at once, each in its own process on its share of the cores
    seed: int = 0

    def __post_init__(self):
        if self.sinks and (min(self.sinks) < 0 or max(self.sinks) >= self.window):
            raise ConfigError(f"sinks={self.sinks} with window={self.window}: each n must satisfy 0 <= n < window "
                              "(the cache holds n sinks + window - n recent tokens)")
        if self.sinks and self.stream_tokens <= self.window:
            raise ConfigError(f"stream_tokens={self.stream_tokens} must exceed window={self.window}, "
                              "or no cache evicts")
        if self.workers < 1 or not 0 < self.holdout < 1:
            raise ConfigError(f"workers={self.workers}, holdout={self.holdout}: need workers >= 1, 0 < holdout < 1")


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # (N,) token ids
    held_out: torch.Tensor  # (M,) the text's tail: streaming and the final sink metrics
    vocab_size: int  # the sink entry included
    sink_id: int
    about: str
    unigram_nll: float  # nats per held-out token under the training text's token frequencies (add-one)


def load_corpus(cfg: PretrainSetup) -> Corpus:
    """Byte-level BPE trained on the text's head (cached), plus the sink entry; the tail held out."""
    text, holdout, vocab_size = cfg.text, cfg.holdout, cfg.vocab_size
    lines = read_corpus(text, "text", "--set text=PATH")
    cut = round(len(lines) * (1 - holdout))
    tokenizer = make_tokenizer("bpe", lines[:cut], vocab_size)
    sink = tokenizer.add_sink()
    train, held = tokenizer.encode_lines(lines[:cut]), tokenizer.encode_lines(lines[cut:])
    if held.numel() <= max(cfg.stream_tokens if cfg.sinks else 0, cfg.probe_length + 1):
        raise ConfigError(f"the held-out text has {held.numel()} tokens, too few for stream_tokens={cfg.stream_tokens} "
                          f"and probe_length={cfg.probe_length}: raise holdout or give a longer text")
    about = (f"{text}: {train.numel():,} training tokens, {held.numel():,} held-out tokens (its last "
             f"{holdout:.0%} of lines), byte-level BPE of {tokenizer.vocab_size:,} entries (the sink's included)")
    return Corpus(train, held, tokenizer.vocab_size, sink, about, unigram_nll(train, held, tokenizer.vocab_size))


def unigram_nll(train: torch.Tensor, held: torch.Tensor, vocab_size: int) -> float:
    """Cross-entropy (nats/token) of ``held`` (M,) under the add-one unigram of ``train`` (N,): the loss a model
    reaches by learning token frequencies alone -- one that stays above it has learned nothing a sink could serve."""
    counts = torch.bincount(train, minlength=vocab_size).double() + 1  # (V,)
    return float(-(counts[held] / counts.sum()).log().mean())


def build_variant(cfg, variant: str, corpus: Corpus) -> CausalLM:
    """The experiment's Llama with ``variant`` attention, initialised from ``cfg.seed``."""
    torch.manual_seed(cfg.seed)
    sink_token = variant == "sink-token"
    return build_llama(LlamaLMConfig(
        corpus.vocab_size, cfg.d_model, cfg.layers, cfg.heads, cfg.heads, cfg.d_ffn, cfg.context + sink_token,
        attention=variant, sink_token_id=corpus.sink_id if sink_token else None))


def train_config(cfg) -> TrainConfig:
    return TrainConfig(optimizer="adamw", lr=cfg.lr, weight_decay=cfg.weight_decay, clip=1.0, batching="random",
                       batch_size=cfg.batch_size, bptt=cfg.context, steps=cfg.steps, track_every=cfg.track_every,
                       eval_every=cfg.steps, eval_batches=cfg.eval_batches, checkpoint_every=cfg.steps,
                       seed=cfg.seed)


@dataclass
class VariantRun:
    lines: list[dict]  # the trainer's metrics, one per tracked step
    held_out: dict  # Gu et al.'s sink rate and the first-token share on held-out text, at the end
    nll: dict[int, np.ndarray]  # n sinks -> per-token streaming NLL through the cache n + (W - n)


def run_variant(cfg, variant: str, corpus: Corpus, run_dir: Path, device: str, show_progress: bool) -> VariantRun:
    """Train one variant into ``run_dir`` (its metrics.jsonl; model/ if ``cfg.keep_models``), then measure
    its sinks on held-out text and stream that text through every cache of ``cfg.sinks`` (none: no stream)."""
    model = build_variant(cfg, variant, corpus)
    trainer = Trainer(model, corpus.train, corpus.held_out, train_config(cfg), run_dir, device)
    lines = trainer.fit(show_progress=show_progress, desc=run_dir.name)
    (run_dir / "checkpoint.pt").unlink()  # the figures need the metrics only; the model is kept below
    if cfg.keep_models:
        model.save_pretrained(run_dir / "model")
    model.eval()
    held = held_out_sinks(model, corpus.held_out, cfg.probe_sequences, cfg.probe_length)
    held["norm0_ratio"], held["valid_loss"] = lines[-1]["norm0_ratio"], lines[-1].get("valid_loss")
    nll = sink_table(model.hf, corpus.held_out[: cfg.stream_tokens], cfg.window, cfg.sinks) if cfg.sinks else {}
    return VariantRun(lines, held, nll)


def _job(cfg, variant: str, corpus: Corpus, run_dir: Path, device: str) -> VariantRun:
    return run_variant(cfg, variant, corpus, run_dir, device, show_progress=False)


def run_all(jobs: dict[str, tuple], corpus: Corpus, ctx, workers: int) -> dict[str, VariantRun]:
    """``jobs``: name -> (config, variant), each run into ``ctx.out/<name>/``; ``workers`` processes at once
    (:func:`attnlab.core.workers.in_processes`), or this process alone when ``workers`` is 1. Same results
    either way: each run seeds its own model and data order."""
    if workers <= 1 or len(jobs) == 1:
        return {name: run_variant(c, v, corpus, ctx.out / name, ctx.device, ctx.show_progress)
                for name, (c, v) in jobs.items()}
    with ctx.progress(len(jobs), f"training runs ({min(workers, len(jobs))} at once)") as bar:
        args = {name: (c, v, corpus, ctx.out / name, ctx.device) for name, (c, v) in jobs.items()}
        return in_processes(_job, args, workers, bar)


@torch.no_grad()
def held_out_sinks(model: CausalLM, ids: torch.Tensor, n: int, length: int, eps: float = 0.3) -> dict:
    """Gu et al.'s protocol on held-out text: ``n`` sequences of ``length`` tokens (a sink-token model's
    sink first, as in training) -> Sink_k^eps for k = 0..9, the first-token share per layer and the strongest
    head's importance_0 (how close the nearest head is to eps)."""
    starts = torch.linspace(0, ids.numel() - length - 1, n).long()
    x = torch.stack([ids[s: s + length] for s in starts.tolist()])  # (n, length)
    if (sink := model.sink_token_id) is not None:
        x = prepend(x, sink)  # (n, length + 1), as in training
    _, maps = model(x.to(next(model.parameters()).device), attentions=True)
    return {"sink_rate": sink_rate(maps, eps), "first_token_share": [float(sink_share(a).mean()) for a in maps],
            "sink_importance_max": max(float(sink_importance(a, 1).max()) for a in maps)}
