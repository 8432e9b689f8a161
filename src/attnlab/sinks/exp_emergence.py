"""``sink-emergence``: when does a sink emerge in the vanilla model, and what does it take? Gu et al. (ICLR
2025) find sinks only after effective training on enough data (60M models, billions of tokens), sooner with a
higher learning rate and more weight decay. This CPU trains a few million tokens in minutes, so their levers
become the sweep axes: learning rate x weight decay, each run tracked over its steps (the third lever), on the
setup of ``sink-pretraining`` with vanilla softmax only.

Each cell reports Gu et al.'s Sink_0^0.3 on held-out text at the end, and the step at which the probe's
Sink_0 first reaches ``sink_emerges`` (if it does). One claim, fixed before the first run: at least one cell
grows a sink (Sink_0 >= ``sink_emerges`` on held-out text) -- if none does, the report says how far the
levers went. Its premise, checked first since 2026-11-27: every cell learns the text (held-out loss below the
unigram's); where one does not, or a quick run's few steps grow no sink, the claim is unresolved
(:mod:`attnlab.sinks.premises`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check, finding
from attnlab.experiments.registry import Result, register
from attnlab.sinks.plots import lever_figure
from attnlab.sinks.premises import learns_text, sink_verdict
from attnlab.sinks.pretrain import PretrainSetup, load_corpus, run_all

TALK_ORDER = 1  # after sink-pretraining


@dataclass(frozen=True)
class EmergenceConfig(PretrainSetup):
    lrs: tuple[float, ...] = (2e-3, 2e-2)  # around sink-pretraining's 6e-3 and 0.5
    weight_decays: tuple[float, ...] = (0.1, 1.0)
    steps: int = 500
    keep_models: bool = False
    sink_emerges: float = 0.2  # Sink_0^0.3 on held-out text; fixed before the first run
    checked: bool = True  # False (the quick mode): no sink in its few steps leaves the claim unresolved

    def __post_init__(self):
        super().__post_init__()
        if not self.lrs or not self.weight_decays or min(self.lrs) <= 0 or min(self.weight_decays) < 0:
            raise ConfigError(f"lrs={self.lrs}, weight_decays={self.weight_decays}: give rates > 0 and decays >= 0")


def cell(lr: float, wd: float) -> str:
    return f"lr{lr:g}-wd{wd:g}"


def first_step(lines: list[dict], threshold: float) -> int | None:
    """The first tracked step whose probe Sink_0 reaches ``threshold``; None if none does."""
    return next((line["step"] for line in lines if line["sink_rate"][0] >= threshold), None)


@register(
    "sink-emergence",
    "When a sink emerges in a small vanilla Llama: Gu et al.'s levers (learning rate x weight decay, over the "
    "steps) swept on local text; Sink_0 and the first-token share over training per cell.",
    EmergenceConfig,
    quick={"d_model": 32, "layers": 2, "heads": 2, "d_ffn": 64, "vocab_size": 512, "context": 64, "batch_size": 8,
           "steps": 120, "track_every": 20, "eval_batches": 2, "probe_sequences": 16, "lrs": (1e-2, 3e-2),
           "weight_decays": (0.5,), "checked": False},
)
def run_emergence(cfg: EmergenceConfig, ctx) -> Result:
    corpus = load_corpus(cfg)
    jobs = {cell(lr, wd): (replace(cfg, lr=lr, weight_decay=wd), "softmax") for lr in cfg.lrs
            for wd in cfg.weight_decays}
    done = run_all(jobs, corpus, ctx, cfg.workers)
    cells = {name: {"sink_rate_held_out": r.held_out["sink_rate"], "first_token_share": r.held_out["first_token_share"],
                    "strongest_head": r.held_out["sink_importance_max"],
                    "norm0_ratio": r.held_out["norm0_ratio"], "valid_loss": r.held_out["valid_loss"],
                    "first_step": first_step(r.lines, cfg.sink_emerges)} for name, r in done.items()}
    tokens = cfg.steps * cfg.batch_size * cfg.context
    best = max(cells, key=lambda k: (cells[k]["sink_rate_held_out"][0], cells[k]["strongest_head"]))
    worst = max(cells, key=lambda k: cells[k]["valid_loss"])
    learns = learns_text(f"every cell (the worst: {worst})", cells[worst]["valid_loss"], corpus.unigram_nll)
    sink = check(f"a sink emerges in at least one cell within {cfg.steps} steps ({tokens:,} tokens): the largest "
                 f"held-out Sink_0^0.3 over the {len(cells)} cells (best: {best})",
                 cells[best]["sink_rate_held_out"][0], cfg.sink_emerges, 0, "at_least")
    claims = [learns, sink_verdict(sink, learns, not cfg.checked, cfg.steps)]
    claims += [finding(f"{name}: the strongest head's held-out mean attention to token 0 at step {cfg.steps} (a sink "
                       f"at > 0.3); Sink_0 {c['sink_rate_held_out'][0]:.2f}, validation loss {c['valid_loss']:.3f}, "
                       f"probe Sink_0 >= {cfg.sink_emerges} "
                       + (f"from step {c['first_step']}" if c["first_step"] is not None else "at no tracked step"),
                       c["strongest_head"])
               for name, c in cells.items()]
    ctx.savefig(lever_figure({k: r.lines for k, r in done.items()}), "sink_levers.png")
    summary = (f"{corpus.about}. Vanilla Llama, {cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads, "
               f"{cfg.steps} steps of {cfg.batch_size} x {cfg.context} tokens per cell (AdamW). Held-out Sink_0 per "
               "cell: " + "; ".join(f"{k} {c['sink_rate_held_out'][0]:.2f}" for k, c in cells.items()) + ".")
    return Result(claims, {"data": corpus.about, "tokens_per_run": tokens, "cells": cells},
                  {"sink_levers.png": "Per cell (learning rate x weight decay) over training, on the probe window: "
                                      "the strongest head's mean attention to token 0 (dotted: Gu et al.'s eps 0.3; "
                                      "Sink_0 counts the heads above it), the mean first-token share, the training "
                                      "loss."}, summary)
