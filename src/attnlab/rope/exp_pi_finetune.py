"""``pi-finetune``: Positional Interpolation's "200 steps suffice", in miniature.

A small Llama-style decoder is trained from scratch at context ``short`` (256), then extended to
``long`` (1,024) by fine-tuning for ``finetune_steps`` (200) steps at the longer context, twice
from the same checkpoint: (a) directly (positions 256..1023 are new to it) and (b) under PI with
s = long / short (every position is read as m / s, back inside the trained range). Chen et al.
2023: PI reaches its short-context perplexity within a few hundred steps while direct
fine-tuning extends the effective context only slowly.

Perplexity is the validation loss over whole windows (every position 0..T-1 of fixed random
validation windows), evaluated every ``eval_every`` steps, step 0 included.
"""
from __future__ import annotations

import copy
import math
import tempfile
from dataclasses import dataclass

import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.rope.plots import finetune_figure
from attnlab.train.trainer import TrainConfig, Trainer


@dataclass(frozen=True)
class PIFinetuneConfig:
    train: str = "wikitext-2/valid.txt"
    valid: str = "wikitext-2/test.txt"
    vocab_size: int = 4096  # byte-level BPE trained on `train`
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    d_ffn: int = 384
    short: int = 256  # the context it is trained at
    long: int = 1024  # the context it is extended to
    batch_size: int = 8
    base_steps: int = 1000
    base_lr: float = 1e-3
    finetune_steps: int = 200
    finetune_lr: float = 3e-4
    eval_every: int = 25
    eval_batches: int = 16
    seed: int = 0
    # claim threshold, fixed before the first run
    near: float = 1.10  # PI at `long` after finetune_steps: PPL <= 1.10 x the base PPL at `short`

    def __post_init__(self):
        if self.long <= self.short or self.short < 8:
            raise ConfigError(f"short={self.short}, long={self.long}: need 8 <= short < long")
        if self.finetune_steps < self.eval_every or self.base_steps < 1:
            raise ConfigError("need base_steps >= 1 and finetune_steps >= eval_every")


def _trainer(model, train_ids, valid_ids, cfg: PIFinetuneConfig, bptt: int, steps: int, lr: float, every: int,
             run_dir, ctx) -> Trainer:
    """Adam on random windows of ``bptt`` tokens, validated every ``every`` steps (and at step 0)."""
    tcfg = TrainConfig(optimizer="adam", lr=lr, clip=1.0, batching="random", batch_size=cfg.batch_size, bptt=bptt,
                       steps=steps, track_every=every, eval_every=every, eval_batches=cfg.eval_batches,
                       checkpoint_every=steps, seed=cfg.seed)
    return Trainer(model, train_ids, valid_ids, tcfg, run_dir, ctx.device)


def _valid_curve(lines: list[dict]) -> tuple[list[int], list[float]]:
    pts = [(ln["step"], math.exp(ln["valid_loss"])) for ln in lines if "valid_loss" in ln]
    return [s for s, _ in pts], [p for _, p in pts]


@register("pi-finetune", "PI vs direct fine-tuning from context 256 to 1024 in 200 steps: a small Llama trained "
          "here, perplexity-vs-steps curves", PIFinetuneConfig,
          quick={"base_steps": 150, "finetune_steps": 50, "eval_every": 25, "eval_batches": 4, "long": 512,
                 "vocab_size": 1024}, demo=False)
def run_pi_finetune(cfg: PIFinetuneConfig, ctx) -> Result:
    from attnlab.data.sources import read_corpus
    from attnlab.models.causal_lm import LlamaLMConfig, build_llama
    from attnlab.models.tokenizer import make_tokenizer
    from attnlab.rope.apply import ScaledRope, export_scaling
    from attnlab.rope.scalings import make_scaling

    train_lines, valid_lines = read_corpus(cfg.train, "train"), read_corpus(cfg.valid, "valid")
    tok = make_tokenizer("bpe", train_lines, cfg.vocab_size)
    train_ids, valid_ids = tok.encode_lines(train_lines), tok.encode_lines(valid_lines)
    torch.manual_seed(cfg.seed)
    base = build_llama(LlamaLMConfig(tok.vocab_size, cfg.d_model, cfg.layers, cfg.heads, cfg.kv_heads, cfg.d_ffn,
                                     cfg.short))
    factor = cfg.long / cfg.short
    with tempfile.TemporaryDirectory() as tmp:  # checkpoints: not part of the result
        base_lines = _trainer(base, train_ids, valid_ids, cfg, cfg.short, cfg.base_steps, cfg.base_lr,
                              max(cfg.base_steps // 4, 1), f"{tmp}/base", ctx).fit(
            show_progress=ctx.show_progress, desc=f"base @ {cfg.short}")
        base_ppl = _valid_curve(base_lines)[1][-1]
        curves, pi = {}, make_scaling("pi", factor)
        for name, scaling in (("direct", make_scaling("none")), (f"PI s={factor:g}", pi)):
            model = copy.deepcopy(base)
            with ScaledRope(model.hf, scaling):
                lines = _trainer(model, train_ids, valid_ids, cfg, cfg.long, cfg.finetune_steps, cfg.finetune_lr,
                                 cfg.eval_every, f"{tmp}/{name}", ctx).fit(show_progress=ctx.show_progress,
                                                                          desc=f"{name} @ {cfg.long}")
            curves[name] = _valid_curve(lines)
            if scaling is pi:  # the PI model saves and reloads with its scaling
                export_scaling(model.hf.config, pi)
                model.save_pretrained(ctx.out / "pi_model", tok)
    (_, direct), (p_steps, pi) = curves.values()  # both evaluated at the same steps
    claims = [
        check(f"PI reaches near its {cfg.short}-context PPL at {cfg.long} within {cfg.finetune_steps} steps: "
              f"PPL ratio ({pi[-1]:.2f} / {base_ppl:.2f})", pi[-1] / base_ppl, cfg.near, 0.0, "at_most"),
        check(f"PI beats direct fine-tuning at every step budget (steps {', '.join(map(str, p_steps))}): number of "
              "evaluations where direct PPL <= PI PPL", sum(d <= p for d, p in zip(direct, pi)), 0, 0.0, "at_most"),
    ]
    finetune_figure(ctx, curves, base_ppl, cfg.short, cfg.long)
    summary = (f"A {cfg.layers}-layer d={cfg.d_model} Llama trained {cfg.base_steps} steps at context {cfg.short} on "
               f"{cfg.train} (validation PPL {base_ppl:.2f}), then fine-tuned {cfg.finetune_steps} steps "
               f"at {cfg.long}: direct PPL {direct[0]:.2f} -> {direct[-1]:.2f}, PI PPL {pi[0]:.2f} -> {pi[-1]:.2f}. "
               "The PI model is saved in pi_model/ with its scaling in config.json.")
    return Result(claims, {"base_ppl_short": base_ppl, "steps": p_steps, "ppl_direct": direct, "ppl_pi": pi},
                  {"pi_finetune.png": "validation PPL at the long context against fine-tuning steps, direct vs PI"},
                  summary)
