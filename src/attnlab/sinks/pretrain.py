"""Pre-train the same small Llama once per attention variant: same text, tokenizer, seed, data order,
steps and size; only the attention differs (:data:`attnlab.core.attention.VARIANTS`).

Training windows are drawn at random offsets of the text, so they start all over it (never all with
one token, which would become a sink by accident); the sink-token variant alone gets its token in
front of every window (:class:`attnlab.train.batching.PrependSink`). Every variant shares one
vocabulary, the sink entry included, so the embeddings are the same size. The trainer's probe records,
every ``track_every`` steps, the first-token share per layer, Gu et al.'s sink rate Sink_k^0.3 and the
hidden-state norm at position 0 over the others (``metrics.jsonl`` in each variant's folder).
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from attnlab.core.metrics import sink_rate, sink_share
from attnlab.data.sources import read_corpus
from attnlab.models.causal_lm import CausalLM, LlamaLMConfig, build_llama
from attnlab.models.tokenizer import make_tokenizer
from attnlab.sinks.table import sink_table
from attnlab.train.trainer import TrainConfig, Trainer


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # (N,) token ids
    held_out: torch.Tensor  # (M,) the text's tail: streaming and the final sink metrics
    vocab_size: int  # the sink entry included
    sink_id: int
    about: str


def load_corpus(text: str, holdout: float, vocab_size: int) -> Corpus:
    """Byte-level BPE trained on the text's head (cached), plus the sink entry; the tail held out."""
    lines = read_corpus(text, "text", "--set text=PATH")
    cut = round(len(lines) * (1 - holdout))
    tokenizer = make_tokenizer("bpe", lines[:cut], vocab_size)
    sink = tokenizer.add_sink()
    train, held = tokenizer.encode_lines(lines[:cut]), tokenizer.encode_lines(lines[cut:])
    about = (f"{text}: {train.numel():,} training tokens, {held.numel():,} held-out tokens (its last "
             f"{holdout:.0%} of lines), byte-level BPE of {tokenizer.vocab_size:,} entries (the sink's included)")
    return Corpus(train, held, tokenizer.vocab_size, sink, about)


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


def run_variant(cfg, variant: str, corpus: Corpus, out: Path, device: str, show_progress: bool) -> VariantRun:
    """Train one variant into ``out/<variant>/`` (its metrics.jsonl; model/ if ``cfg.keep_models``), then
    measure its sinks on held-out text and stream that text through every cache."""
    model = build_variant(cfg, variant, corpus)
    run_dir = out / variant
    trainer = Trainer(model, corpus.train, corpus.held_out, train_config(cfg), run_dir, device)
    lines = trainer.fit(show_progress=show_progress, desc=variant)
    (run_dir / "checkpoint.pt").unlink()  # the figures need the metrics only; the model is kept below
    if cfg.keep_models:
        model.save_pretrained(run_dir / "model")
    model.eval()
    held = held_out_sinks(model, corpus.held_out, cfg.probe_sequences, cfg.probe_length)
    held["norm0_ratio"], held["valid_loss"] = lines[-1]["norm0_ratio"], lines[-1].get("valid_loss")
    nll = sink_table(model.hf, corpus.held_out[: cfg.stream_tokens], cfg.window, cfg.sinks)
    return VariantRun(lines, held, nll)


def _job(args) -> VariantRun:
    """One variant in a worker process, on its share of the cores."""
    threads, *rest = args
    torch.set_num_threads(threads)
    return run_variant(*rest, show_progress=False)


def run_variants(cfg, corpus: Corpus, ctx) -> dict[str, VariantRun]:
    """Every variant of ``cfg.variants``: in ``cfg.workers`` processes at once (tiny models use one core
    better than two), or in this process when ``workers`` is 1. Same results either way: each run seeds
    its own model and data order."""
    if cfg.workers <= 1 or len(cfg.variants) == 1:
        return {v: run_variant(cfg, v, corpus, ctx.out, ctx.device, ctx.show_progress) for v in cfg.variants}
    workers = min(cfg.workers, len(cfg.variants))
    threads = max(1, (os.cpu_count() or 1) // workers)
    done = {}
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool, \
            ctx.progress(len(cfg.variants), f"variants ({workers} at once)") as bar:  # spawn: no forked OpenMP state
        futures = {pool.submit(_job, (threads, cfg, v, corpus, ctx.out, ctx.device)): v for v in cfg.variants}
        for f in as_completed(futures):
            done[futures[f]] = f.result()
            bar.update(1)
    return {v: done[v] for v in cfg.variants}


@torch.no_grad()
def held_out_sinks(model: CausalLM, ids: torch.Tensor, n: int, length: int, eps: float = 0.3) -> dict:
    """Gu et al.'s protocol on held-out text: ``n`` sequences of ``length`` tokens (a sink-token model's
    sink first, as in training) -> Sink_k^eps for k = 0..9 and the first-token share per layer."""
    starts = torch.linspace(0, ids.numel() - length - 1, n).long()
    x = torch.stack([ids[s: s + length] for s in starts.tolist()])  # (n, length)
    if (sink := model.sink_token_id) is not None:
        x = torch.cat([torch.full_like(x[:, :1], sink), x], 1)
    _, maps = model(x.to(next(model.parameters()).device), attentions=True)
    return {"sink_rate": sink_rate(maps, eps), "first_token_share": [float(sink_share(a).mean()) for a in maps]}
