"""Train a small Llama on MQAR (:mod:`attnlab.recall.mqar`) until it recalls, with the full cache, every pair.

The loss is the query keys' alone (Zoology's: every other position is unpredictable or free). Each step draws
its number of pairs from ``cfg.min_pairs`` to ``cfg.pairs`` and its gap between the pairs and the queries
uniformly from 0 to a cap that grows from ``cfg.start_gap`` to ``cfg.max_gap`` over the first ``cfg.ramp`` of
the steps. Both are a curriculum, found by trying on this CPU: the recall circuit (a previous-token head, then
an induction head matching the query key) forms within a few hundred steps on few pairs and short gaps, where
8 pairs at gaps up to 128 from the start sat for 1,750 steps on the plateau of "some value of this sequence"
(~1/8 right). The track is the recall on one fixed probe batch at the longest gap and the most pairs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.models.causal_lm import CausalLM, LlamaLMConfig, build_llama
from attnlab.recall.mqar import MQAR, sample


@dataclass(frozen=True)
class MQARRun:
    track: list[dict]  # {"step", "seconds", "loss", "recall"} every cfg.track_every steps and at the end
    seconds: float
    model: CausalLM


def task_at(cfg, gap: int, pairs: int | None = None, repeat: bool = True) -> MQAR:
    """The MQAR task of the experiment's vocabulary at one gap (and number of pairs; ``repeat=False``: distinct
    queries, as streamed)."""
    return MQAR(cfg.n_keys, cfg.n_keys, cfg.n_filler, cfg.pairs if pairs is None else pairs, cfg.queries, gap, repeat)


def build(cfg) -> CausalLM:
    torch.manual_seed(cfg.seed)
    longest = task_at(cfg, cfg.max_gap)
    return build_llama(LlamaLMConfig(longest.vocab_size, cfg.d_model, cfg.layers, cfg.heads, cfg.heads, cfg.d_ffn,
                                     longest.length))


def query_logits(model: CausalLM, x: torch.Tensor, scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, V) logits at the N query keys of x (B, L) and (N,) their targets, the values."""
    logits, _ = model(x, attentions=False)  # (B, L, V)
    at = scored[:, :-1]
    return logits[:, :-1][at], x[:, 1:][at]


@torch.no_grad()
def recall(model: CausalLM, x: torch.Tensor, scored: torch.Tensor) -> float:
    """Share of the query keys whose most likely next token is their pair's value (the full cache)."""
    logits, target = query_logits(model, x, scored)
    return float((logits.argmax(-1) == target).float().mean())


def train_mqar(cfg, progress=None) -> MQARRun:
    """``cfg.steps`` AdamW steps (one-cycle rate, peak ``cfg.lr``; gradients clipped at 1) on fresh batches."""
    model = build(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    probe = torch.Generator().manual_seed(cfg.seed + 2)
    x_probe, s_probe, _ = sample(task_at(cfg, cfg.max_gap), cfg.probe_batch, probe)
    track, t0, loss = [], time.perf_counter(), torch.tensor(float("nan"))
    model.train()
    for step in range(cfg.steps + 1):
        if step % cfg.track_every == 0 or step == cfg.steps:
            model.eval()
            track.append({"step": step, "seconds": time.perf_counter() - t0, "loss": float(loss.detach()),
                          "recall": recall(model, x_probe, s_probe)})
            model.train()
        if step == cfg.steps:
            break
        cap = min(cfg.max_gap, max(cfg.start_gap, int(cfg.max_gap * step / max(1.0, cfg.ramp * cfg.steps))))
        draw = torch.randint(0, 1 << 30, (2,), generator=gen).tolist()
        task = task_at(cfg, draw[0] % (cap + 1), cfg.min_pairs + draw[1] % (cfg.pairs - cfg.min_pairs + 1))
        x, scored, _ = sample(task, cfg.batch, gen)
        logits, target = query_logits(model, x, scored)
        loss = F.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if progress is not None:
            progress.update(1)
    model.eval()
    return MQARRun(track, time.perf_counter() - t0, model)


def first_at(track: list[dict], level: float) -> dict | None:
    """The first tracked point whose probe recall reaches ``level`` (None: none does)."""
    return next((t for t in track if t["recall"] >= level), None)

