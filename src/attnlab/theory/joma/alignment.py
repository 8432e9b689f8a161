"""Theorem 5 measured: co-occurrence against 1 − H/L, and FFN units' alignment with the latents.

* Data side: the empirical P[l | m] of a latent tree against the theorem's 1 − H(l, m)/L
  (:func:`cooccurrence_fit`), with a batch-means standard error of the slope and binomial
  z-scores against the preset's own law.
* Learning side: the authors' alignment score (for each latent, its best correlation with any
  FFN unit, units max-pooled over the sequence; a level's score is the mean over its latents),
  measured on a held-out batch while a transformer trains (:func:`train_and_score`), with a
  bracket on the Bayes-optimal accuracy to judge the accuracy against.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import attention_entropy
from attnlab.theory.joma.hierarchy import VARIANTS, HierarchyData, LatentTree, LatentTreeConfig, TopDownConfig
from attnlab.theory.joma.transformer import PostLNTransformer, TransformerConfig, train_classifier


# --------------------------------------------------------------------------- co-occurrence
def cooccurrence(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Empirical P[l | m] = count(l and m) / count(m) from presence (N, V) bool.

    Returns P: (V, V) float64 (row l, column m; NaN where count(m) = 0) and count_m: (V,).
    """
    x = tokens.double()
    both = x.T @ x  # (V, V): count(l and m)
    count = x.sum(0)  # (V,)
    return both / count[None, :].where(count > 0, torch.tensor(float("nan"), dtype=torch.float64)), count


def fit_line(measured: torch.Tensor, predicted: torch.Tensor) -> dict[str, float]:
    """Pearson r and least-squares line measured ≈ slope·predicted + intercept (1-D float tensors)."""
    x, y = predicted.double(), measured.double()
    xc, yc = x - x.mean(), y - y.mean()
    slope = float((xc * yc).sum() / (xc * xc).sum())
    r = float((xc * yc).sum() / ((xc * xc).sum() * (yc * yc).sum()).sqrt())
    return {"pearson": r, "slope": slope, "intercept": float(y.mean() - slope * x.mean())}


def cooccurrence_fit(tree: LatentTree, tokens: torch.Tensor, chunks: int, min_count: int) -> dict:
    """Measured P[l|m] vs 1 − H/L over ordered within-class pairs l ≠ m (cross-class pairs are
    0 = 0 exactly and would only inflate the correlation); pairs with count(m) < min_count are left out.

    Returns the fit (pearson, slope, intercept), ``slope_se`` (batch means over ``chunks``),
    ``max_abs_z`` against the preset's own law Π κ_h, and ``_scatter`` (predicted, measured, H) for plots.
    """
    H = tree.lca_height()  # (V, V)
    linear = 1.0 - H.double() / tree.L  # the theorem's 1 − H/L
    exact = tree.cooccurrence_table()  # this preset's Π κ_h
    P, count = cooccurrence(tokens)
    pair = (H > 0) & (H < tree.L) & (count[None, :] >= min_count)  # (V, V)
    fit = fit_line(P[pair], linear[pair])
    # z of each pair against this preset's own law; binomial SE with count(m) trials
    se = (exact * (1 - exact) / count[None, :]).sqrt()
    z = ((P - exact) / se)[pair]
    slopes = [fit_line(cooccurrence(c)[0][pair], linear[pair])["slope"] for c in tokens.chunk(chunks)]
    return {**fit, "slope_se": float(np.std(slopes, ddof=1) / math.sqrt(len(slopes))),
            "max_abs_z": float(z.abs().max()), "pairs": int(pair.sum()), "min_count_m": float(count.min()),
            "_scatter": (linear[pair].numpy(), P[pair].numpy(), H[pair].numpy())}


# --------------------------------------------------------------------------- alignment score
def pool_hidden(h: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """Max over non-pad positions: h (N, T, F), pad (N, T) bool -> (N, F).

    A sequence with no tokens (possible in the probabilistic tree) pools to 0, the ReLU floor.
    """
    return h.masked_fill(pad[..., None], float("-inf")).amax(1).clamp_min(0.0)


def latent_correlations(hidden: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of every latent with every unit: hidden (N, F), latents (N, J) -> (J, F).

    One matrix product of the standardised columns. A constant column (dead unit, or a latent
    never/always on in this batch) has no correlation: its entries are NaN.
    """
    h = hidden.double()
    z = latents.double()
    hc, zc = h - h.mean(0), z - z.mean(0)
    hn, zn = hc.norm(dim=0), zc.norm(dim=0)  # (F,), (J,)
    corr = (zc.T @ hc) / (zn[:, None] * hn[None, :])
    ok = (zn[:, None] > 1e-12) & (hn[None, :] > 1e-12)
    return corr.where(ok, torch.tensor(float("nan"), dtype=torch.float64))


def alignment_score(hidden: torch.Tensor, latents: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The authors' score: for each latent its best (signed, largest) correlation over units;
    the level's score is the mean over latents that vary in the batch.

    hidden (N, F), latents (N, J) -> (score, best (J,) float64 with NaN for constant latents).
    """
    corr = latent_correlations(hidden, latents)  # (J, F)
    best = corr.nan_to_num(nan=-math.inf).amax(1)  # (J,)
    best = best.where(torch.isfinite(best), torch.tensor(float("nan"), dtype=torch.float64))
    return float(best.nanmean()), best


def bayes_accuracy(present: torch.Tensor, y: torch.Tensor, num_classes: int) -> tuple[float, float]:
    """Bracket on the Bayes-optimal accuracy from the token *set* (all a sequence carries besides order).

    upper: plug-in Σ_sets max_y count(set, y) / N (biased up when sets are seen rarely);
    lower: cross-fitted — the majority label of each set learned on one half, scored on the
    other (sets unseen in the first half count as errors), averaged over both directions.
    """
    _, inv = torch.unique(present, dim=0, return_inverse=True)
    n_sets = int(inv.max()) + 1

    def table(idx):  # (sets, classes) label counts over samples idx
        return torch.zeros(n_sets, num_classes).index_put_((inv[idx], y[idx]), torch.ones(len(idx)), accumulate=True)

    upper = float(table(torch.arange(len(y))).amax(1).sum() / len(y))
    halves = torch.arange(len(y)).chunk(2)
    lower = 0.0
    for fit, score in (halves, halves[::-1]):
        t = table(fit)
        guess = t.argmax(1)[inv[score]]
        seen = t.sum(1)[inv[score]] > 0
        lower += float(((guess == y[score]) & seen).float().mean()) / 2
    return lower, upper


def evaluate(model: PostLNTransformer, ev, controls: dict) -> dict:
    """Held-out loss, accuracy, attention entropy per layer, and the alignment score per (layer, level)
    against the true latents ``ev[3]`` and against each control's latents (name -> per-level (N, J))."""
    x, pad, y, latents, _ = ev
    with torch.no_grad():
        out = model(x, pad)
    pooled = [pool_hidden(h, pad) for h in out.ffn_hidden]  # per layer (N, F)
    real = ~pad  # entropy over real query rows; each row's mass sits on real keys only
    entropy = [float(attention_entropy(a).mean(1)[real].mean()) for a in out.attention]

    def scores(lats):  # (layers, levels)
        return [[alignment_score(p, z)[0] for z in lats] for p in pooled]

    return {"loss": float(F.cross_entropy(out.logits, y)), "acc": float((out.logits.argmax(1) == y).float().mean()),
            "score": scores(latents), **{k: scores(v) for k, v in controls.items()}, "attention_entropy": entropy}


def train_and_score(model: PostLNTransformer, data: HierarchyData, ev, controls: dict, marks, steps: int,
                    batch_size: int, lr: float, weight_decay: float, gen: torch.Generator, device: str = "cpu",
                    on_step: Callable[[int], None] | None = None) -> tuple[dict, list[float], list[float]]:
    """Train ``model`` on fresh batches of ``data`` (Adam) and :func:`evaluate` it on the CPU at the
    steps ``marks``. -> ({step: evaluation}, per-step train loss, per-step train accuracy)."""
    evals = {}

    def score(step: int) -> None:
        model.eval()
        evals[step] = evaluate(model.cpu(), ev, controls)
        model.to(device).train()

    def draw():
        x, pad, y, _, _ = data.draw(batch_size, gen)
        return x, pad, y

    loss, acc = train_classifier(model, draw, steps, lr, weight_decay, device, score, marks, on_step)
    return evals, loss, acc


# --------------------------------------------------------------------------- one training run
@dataclass(frozen=True)
class HierarchyConfig:
    """Deviation from the authors (3 blocks, d = 1024, FFN 400, Adam lr 1e-5, wd 1e-4, 10k steps,
    batch 128): far too slow on 2 CPU cores, so a smaller model (d = 64, FFN 256, 4 heads) with
    a 100x larger learning rate and 800 steps; same batch size, weight decay and data."""

    variant: str = "topdown"  # topdown: the authors' Table 1 data; tree: the probabilistic latent tree
    data: TopDownConfig = TopDownConfig()  # also gives seq_len for variant=tree
    tree: LatentTreeConfig = LatentTreeConfig(num_classes=4, height=4)  # variant=tree only: 32 tokens
    model: TransformerConfig = TransformerConfig()
    steps: int = 800
    batch_size: int = 128
    lr: float = 1e-3  # Adam; authors 1e-5 over 10k steps
    weight_decay: float = 1e-4  # Adam's L2 term, as the authors
    eval_size: int = 2048  # fresh held-out batch for scores and accuracy
    n_evals: int = 9  # score checkpoints, step 0 included
    bayes_samples: int = 50_000  # to bracket the Bayes-optimal accuracy from token sets
    margin: float = 0.1  # a "clear" gain of a level's best score over its step-0 value
    seed: int = 0

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ConfigError(f"variant={self.variant!r}: use one of {', '.join(VARIANTS)}")
        if self.variant == "tree" and self.tree.branching ** (self.tree.height - 1) > self.data.seq_len:
            raise ConfigError(f"a tree class can emit {self.tree.branching ** (self.tree.height - 1)} tokens > "
                              f"data.seq_len={self.data.seq_len}: raise data.seq_len or lower tree.height")
        if min(self.steps, self.batch_size, self.eval_size, self.bayes_samples) < 1 or self.n_evals < 2:
            raise ConfigError("need steps, batch_size, eval_size, bayes_samples >= 1 and n_evals >= 2")
        if not (self.lr > 0 and self.weight_decay >= 0):
            raise ConfigError(f"lr={self.lr}, weight_decay={self.weight_decay}: need lr > 0 and weight_decay >= 0")


class HierarchyRun(NamedTuple):
    data: HierarchyData
    evals: dict  # step -> :func:`evaluate`'s dict
    marks: list[int]  # the evaluated steps
    train_loss: list[float]
    train_acc: list[float]
    bayes: tuple[float, float] | None  # the Bayes-optimal accuracy's bracket (with_bayes), else None
    seconds: float


def hierarchy_run(cfg: HierarchyConfig, seed: int, device: str = "cpu", on_step: Callable[[int], None] | None = None,
                  with_bayes: bool = False) -> HierarchyRun:
    """One model trained on the hierarchy from ``seed`` and scored at log-spaced steps, against the true latents
    and two controls: shuffled latents (no relation to the input: the null) and latents of an independent draw
    with the SAME labels (what class identity alone explains)."""
    t_start = time.perf_counter()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data = HierarchyData(cfg.variant, cfg.data, cfg.tree)
    ev = data.draw(cfg.eval_size, torch.Generator().manual_seed(seed + 10_000))
    perm = torch.randperm(cfg.eval_size, generator=torch.Generator().manual_seed(seed + 20_000))
    resampled = data.draw(cfg.eval_size, torch.Generator().manual_seed(seed + 30_000), ev[2])[3]
    controls = {"shuffled": [z[perm] for z in ev[3]], "same_class_resample": resampled}
    bayes = None
    if with_bayes:
        big = data.draw(cfg.bayes_samples, torch.Generator().manual_seed(seed + 40_000))
        bayes = bayes_accuracy(big[4], big[2], data.classes)
    model = PostLNTransformer(cfg.model, data.vocab, cfg.data.seq_len, data.classes, data.pad_id).to(device)
    marks = sorted({0, cfg.steps,
                    *(int(s) for s in np.geomspace(max(cfg.steps / 32, 1), cfg.steps, cfg.n_evals - 1).round())})
    evals, loss, acc = train_and_score(model, data, ev, controls, marks, cfg.steps, cfg.batch_size, cfg.lr,
                                       cfg.weight_decay, gen, device, on_step)
    return HierarchyRun(data, evals, marks, loss, acc, bayes, time.perf_counter() - t_start)


def null_bound(cfg: HierarchyConfig) -> float:
    """sqrt(2 ln F / N): E max of F null correlations over N samples is below it."""
    return math.sqrt(2 * math.log(cfg.model.d_ffn) / cfg.eval_size)
