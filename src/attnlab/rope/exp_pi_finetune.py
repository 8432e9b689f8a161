"""``pi-finetune``: Positional Interpolation's table, in miniature, on a base that fails first.

Chen et al. 2023 (the talk's PI slides): a Llama trained at L = 2,048 is > 10³ PPL at 4,096+
(direct extrapolation fails); fine-tuned directly at 8,192 its PPL still rises with the window
(7.21, 7.34, 7.69 at 2k, 4k, 8k), while under PI (positions read as m / s) < 1,000 steps make the
longer window pay (7.13, 6.96, 6.95) and keep the original one (7.13 <= 7.20); by passkey, PI
reaches the whole window from step 200 while direct fine-tuning crawls (2,560 after 10k steps).

The miniature: a 4-layer d=128 Llama trained ``base_steps`` at ``short`` = 64 tokens of a text whose
last ``holdout`` is never trained on -- trained long enough that its attention leans on angles
that break past its window (rope-extrapolation-base: 2.03x its in-window PPL at 4x) -- then, from
that one checkpoint, ``finetune_steps`` at ``long`` = 4 x short under each scaling (none = direct,
PI, NTK-aware, YaRN; :mod:`attnlab.rope.scalings`). The table is the papers' protocol
(:mod:`attnlab.evals.longppl`, stride W/2): windows of W, 2W, 4W tokens aligned by their end score
the same last W/2 tokens of the held-out text, so a row compares context lengths on the same tokens.
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
from attnlab.rope.plots import extension_figure
from attnlab.train.trainer import TrainConfig, Trainer

FACTORS = (1, 2, 4)  # evaluation windows, in units of `short` (the paper's 2k, 4k, 8k)
PAPER = {"none": (7.20, "> 10³", "> 10³"), "FT": (7.21, 7.34, 7.69), "PI": (7.13, 6.96, 6.95)}  # 7B, s = 4


@dataclass(frozen=True)
class PIFinetuneConfig:
    text: str = "war-and-peace"
    holdout: float = 0.1  # the text's last share of lines: validation only
    vocab_size: int = 4096  # byte-level BPE trained on the training lines
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    d_ffn: int = 384
    rope_theta: float = 10000.0
    short: int = 64  # the context the base is trained at (W)
    long: int = 256  # the context it is extended to (4W)
    base_batch: int = 32
    base_steps: int = 4000  # long enough to fail first (see rope-extrapolation-base)
    base_lr: float = 1e-3
    batch_size: int = 8  # fine-tuning: 8 x 256 = the base's 32 x 64 tokens a step
    finetune_steps: int = 1000  # the paper's "< 1,000 steps"
    finetune_lr: float = 3e-4
    scalings: tuple[str, ...] = ("none", "pi", "ntk", "yarn")
    eval_every: int = 100
    eval_batches: int = 16
    table_windows: int = 64  # scored blocks of the table (evenly over the held-out text)
    seed: int = 0
    # claim threshold, fixed before the first run: "200 steps suffice" (the passkey table)
    suffice_steps: int = 200

    def __post_init__(self):
        if self.long != FACTORS[-1] * self.short or self.short < 8:
            raise ConfigError(f"short={self.short}, long={self.long}: the table reads windows of 1, 2 and 4 x short, "
                              f"so set long = 4 x short (e.g. short=64 long=256)")
        if (self.finetune_steps < self.eval_every or self.base_steps < 1 or self.suffice_steps % self.eval_every
                or not 0 < self.suffice_steps <= self.finetune_steps):
            raise ConfigError("need base_steps >= 1, finetune_steps >= eval_every and suffice_steps a multiple of "
                              f"eval_every={self.eval_every} within finetune_steps={self.finetune_steps}")
        if not 0 < self.holdout < 1 or self.table_windows < 1:
            raise ConfigError(f"holdout={self.holdout}, table_windows={self.table_windows}: need 0 < holdout < 1 "
                              "and table_windows >= 1")
        from attnlab.rope.scalings import SCALINGS

        unknown = [s for s in self.scalings if s not in SCALINGS]
        if unknown or not {"none", "pi"} <= set(self.scalings):
            raise ConfigError(f"scalings={self.scalings}: name some of {', '.join(SCALINGS)}, none and pi included")


def _trainer(model, train_ids, valid_ids, cfg: PIFinetuneConfig, bptt: int, batch: int, steps: int, lr: float,
             every: int, run_dir, ctx) -> Trainer:
    """Adam on random windows of ``bptt`` tokens, validated every ``every`` steps (and at step 0)."""
    tcfg = TrainConfig(optimizer="adam", lr=lr, clip=1.0, batching="random", batch_size=batch, bptt=bptt,
                       steps=steps, track_every=every, eval_every=every, eval_batches=cfg.eval_batches,
                       checkpoint_every=steps, seed=cfg.seed)
    return Trainer(model, train_ids, valid_ids, tcfg, run_dir, ctx.device)


def _valid_curve(lines: list[dict]) -> tuple[list[int], list[float]]:
    pts = [(ln["step"], math.exp(ln["valid_loss"])) for ln in lines if "valid_loss" in ln]
    return [s for s, _ in pts], [p for _, p in pts]


def table_row(model, valid_ids: torch.Tensor, cfg: PIFinetuneConfig) -> list[float]:
    """PPL of the same held-out tokens with windows of W, 2W, 4W (the papers' sliding-window protocol): each
    window scores its last W / 2 tokens, so a token scored at window n sees n - W/2 to n - 1 tokens before it."""
    from attnlab.evals.longppl import long_ppl

    r = long_ppl(model.hf.eval(), valid_ids, [f * cfg.short for f in FACTORS], stride=cfg.short // 2,
                 windows=cfg.table_windows)
    model.hf.train()
    return [r.ppl(f * cfg.short) for f in FACTORS]


def _data(cfg: PIFinetuneConfig):
    from attnlab.data.corpus import split_tail
    from attnlab.data.sources import read_corpus
    from attnlab.models.tokenizer import make_tokenizer

    train_lines, valid_lines = split_tail(read_corpus(cfg.text, "text"), cfg.holdout)
    tok = make_tokenizer("bpe", train_lines, cfg.vocab_size)
    return tok, tok.encode_lines(train_lines), tok.encode_lines(valid_lines)


@register("pi-finetune", "PI's table in miniature: a small Llama trained at 64 tokens until direct extrapolation "
          "fails, then 1,000 fine-tuning steps at 256 directly, under PI, NTK and YaRN", PIFinetuneConfig,
          quick={"base_steps": 150, "finetune_steps": 50, "eval_every": 25, "suffice_steps": 25, "eval_batches": 4,
                 "vocab_size": 1024, "table_windows": 8}, demo=False)
def run_pi_finetune(cfg: PIFinetuneConfig, ctx) -> Result:
    from attnlab.models.causal_lm import LlamaLMConfig, build_llama
    from attnlab.rope.apply import ScaledRope, export_scaling
    from attnlab.rope.scalings import make_scaling

    tok, train_ids, valid_ids = _data(cfg)
    torch.manual_seed(cfg.seed)
    base = build_llama(LlamaLMConfig(tok.vocab_size, cfg.d_model, cfg.layers, cfg.heads, cfg.kv_heads, cfg.d_ffn,
                                     cfg.short, rope_theta=cfg.rope_theta))
    factor = cfg.long / cfg.short
    rows, curves = {}, {}
    with tempfile.TemporaryDirectory() as tmp:  # checkpoints: not part of the result
        base_lines = _trainer(base, train_ids, valid_ids, cfg, cfg.short, cfg.base_batch, cfg.base_steps,
                              cfg.base_lr, max(cfg.base_steps // 4, 1), f"{tmp}/base", ctx).fit(
            show_progress=ctx.show_progress, desc=f"base @ {cfg.short}")
        for name in cfg.scalings:
            model, scaling = copy.deepcopy(base), make_scaling(name, factor)
            with ScaledRope(model.hf, scaling):
                before = table_row(model, valid_ids, cfg)  # the scaling alone, no fine-tuning
                lines = _trainer(model, train_ids, valid_ids, cfg, cfg.long, cfg.batch_size, cfg.finetune_steps,
                                 cfg.finetune_lr, cfg.eval_every, f"{tmp}/{name}", ctx).fit(
                    show_progress=ctx.show_progress, desc=f"{name} @ {cfg.long}")
                rows[name] = {"before": before, "after": table_row(model, valid_ids, cfg)}
            curves[name] = _valid_curve(lines)
            if name == "pi":  # the PI model saves and reloads with its scaling
                export_scaling(model.hf.config, scaling)
                model.save_pretrained(ctx.out / "pi_model", tok)
    base_whole = _valid_curve(base_lines)[1][-1]
    claims = extension_claims(cfg, rows, curves, base_whole)
    extension_figure(ctx, curves, rows, cfg.short, FACTORS)
    base_row = rows["none"]["before"]
    summary = (f"A {cfg.layers}-layer d={cfg.d_model} Llama (RoPE θ = {cfg.rope_theta:g}, BPE {tok.vocab_size:,}) "
               f"trained {cfg.base_steps} steps at {cfg.short} tokens of {cfg.text} (the last {cfg.holdout:.0%} held "
               f"out), then fine-tuned {cfg.finetune_steps} steps at {cfg.long} under each scaling. Direct "
               f"extrapolation: PPL {' -> '.join(f'{p:.1f}' for p in base_row)} at windows "
               f"{', '.join(str(f * cfg.short) for f in FACTORS)} ({base_row[-1] / base_row[0]:.2f}x at {cfg.long}; "
               f"the paper's 7B: 7.20 -> > 10³). After fine-tuning: "
               + "; ".join(f"{n} {' / '.join(f'{p:.1f}' for p in r['after'])}" for n, r in rows.items())
               + " (paper, 7B at s = 4: FT 7.21 / 7.34 / 7.69, PI 7.13 / 6.96 / 6.95). The PI model is saved in "
               "pi_model/ with its scaling in config.json.")
    metrics = {"windows": [f * cfg.short for f in FACTORS], "table": rows, "paper_table": PAPER,
               "base_whole_windows_ppl": base_whole,
               "curves": {n: {"steps": s, "ppl": p} for n, (s, p) in curves.items()}}
    return Result(claims, metrics, {"pi_finetune.png": "Left: validation PPL at the long context (whole windows) "
                                    "against fine-tuning steps, per scaling; dotted: the base in its own window. "
                                    "Right: the table -- PPL of the same held-out tokens with windows of 1, 2, 4 x the "
                                    "trained context, before (dashed) and after (solid) fine-tuning."}, summary)


def extension_claims(cfg: PIFinetuneConfig, rows: dict, curves: dict, base_whole: float) -> list:
    """The PI table's rows and the passkey table's two statements as claims on the measured table and curves;
    ``base_whole``: the base's PPL over whole windows of ``short`` (the curves' protocol)."""
    w, w4 = cfg.short, cfg.long
    none0, ft, pi = rows["none"]["before"], rows["none"]["after"], rows["pi"]["after"]
    steps, direct_c = curves["none"]
    pi_c = curves["pi"][1]
    later = [i for i, s in enumerate(steps) if s > 0]
    at_suffice = pi_c[steps.index(cfg.suffice_steps)]
    best = min(range(len(direct_c)), key=direct_c.__getitem__)
    quick = (f"direct fine-tuning does not crawl here: {direct_c[0]:.1f} -> {direct_c[1]:.1f} by step {steps[1]} "
             f"(its best {direct_c[best]:.1f} at step {steps[best]}), so the far angles are relearned at once")
    return [
        check(f"None row (7.20 -> > 10³): direct extrapolation fails beyond its window, more so further out: PPL "
              f"{' < '.join(f'{p:.1f}' for p in none0)} at windows {w}, {2 * w}, {w4}; pairs in order",
              sum(a < b for a, b in zip(none0, none0[1:])), 2, 0.0, "at_least"),
        check(f"FT row (7.21, 7.34, 7.69): fine-tuned directly at {w4}, the longer window still does not pay: PPL at "
              f"{w4} over PPL at {w} ({ft[-1]:.2f} / {ft[0]:.2f})", ft[-1] / ft[0], 1.0, 0.0, "at_least"
              ).failing_because(quick),
        check(f"PI row (7.13, 6.96, 6.95): after {cfg.finetune_steps} steps under PI the longer window pays: PPL at "
              f"{w4} over PPL at {w} ({pi[-1]:.2f} / {pi[0]:.2f})", pi[-1] / pi[0], 1.0, 0.0, "at_most"),
        check(f"PI keeps the original window (7.13 <= 7.20): PPL at {w} after PI fine-tuning over the base's "
              f"({pi[0]:.2f} / {none0[0]:.2f})", pi[0] / none0[0], 1.0, 0.0, "at_most"),
        check(f"direct fine-tuning crawls: evaluations at {w4} (steps {', '.join(str(steps[i]) for i in later)}) where "
              "direct fine-tuning is at or below PI", sum(direct_c[i] <= pi_c[i] for i in later), 0, 0.0, "at_most"
              ).failing_because(quick),
        check(f"{cfg.suffice_steps} steps suffice: PI's PPL over whole windows of {w4} after {cfg.suffice_steps} steps "
              f"over the base's over whole windows of {w} ({at_suffice:.2f} / {base_whole:.2f})",
              at_suffice / base_whole, 1.0, 0.0, "at_most"),
    ] + scaling_claims(cfg, rows)


def scaling_claims(cfg: PIFinetuneConfig, rows: dict) -> list:
    """NTK-aware's and YaRN's statements: each extends without fine-tuning; YaRN fine-tunes at least as well as PI.
    A failing one says how many never-turning rotary pairs the scaling still takes past their trained angles."""
    from attnlab.rope.scalings import beyond_trained, make_scaling

    w4, none0, pi = cfg.long, rows["none"]["before"], rows["pi"]["after"]

    def why(name: str) -> str:
        r, pi_r = (beyond_trained(make_scaling(n, cfg.long / cfg.short), cfg.rope_theta, cfg.d_model // cfg.heads,
                                  cfg.short, cfg.long) for n in (name, "pi"))
        pairs = cfg.d_model // cfg.heads // 2
        return (f"{r.numel()} of the {pairs} rotary pairs never turn within {cfg.short} tokens; at {w4} {name} "
                f"takes {int((r > 1 + 1e-6).sum())} of them past their trained angles (up to "
                f"{float(r.max()):.2f}x), PI {int((pi_r > 1 + 1e-6).sum())}")

    claims = []
    if "ntk" in rows:
        ntk0, pi0 = rows["ntk"]["before"][-1], rows["pi"]["before"][-1]
        claims.append(check(
            f"NTK-aware extends without fine-tuning: PPL at {w4} with no fine-tuning over the better of direct and "
            f"PI ({ntk0:.2f} / min({none0[-1]:.2f}, {pi0:.2f}))", ntk0 / min(none0[-1], pi0), 1.0, 0.0, "at_most"
        ).failing_because(why("ntk")))
    if "yarn" in rows:
        yarn0, yarn = rows["yarn"]["before"], rows["yarn"]["after"]
        claims += [
            check(f"YaRN extends without fine-tuning: PPL at {w4} over direct extrapolation's ({yarn0[-1]:.2f} / "
                  f"{none0[-1]:.2f})", yarn0[-1] / none0[-1], 1.0, 0.0, "at_most").failing_because(why("yarn")),
            check(f"YaRN fine-tunes at least as well as PI: PPL at {w4} after {cfg.finetune_steps} steps, YaRN over "
                  f"PI ({yarn[-1]:.2f} / {pi[-1]:.2f})", yarn[-1] / pi[-1], 1.0, 0.0, "at_most").failing_because(
                f"YaRN is behind PI at every window, its trained one included ({yarn[0]:.2f} vs {pi[0]:.2f} at "
                f"{cfg.short}): its logit scale (0.1 ln s + 1)² applies at every distance")]
    return claims
