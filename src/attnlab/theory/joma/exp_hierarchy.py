"""Registered JoMA hierarchy experiments (§6, Theorem 5): ``joma-cooccurrence``, ``joma-hierarchy``.

* ``joma-cooccurrence`` — the data-side prediction of Theorem 5: in the probabilistic latent
  tree, P[l | m] = 1 − H(l, m)/L. Sampled co-occurrence vs prediction, for the ``exact``
  keep probabilities (equal by construction) and the ``constant`` ones (≈ only for H ≪ L).
  Kept separate from ``joma-hierarchy`` because it checks the data, not training, and runs
  in seconds.
* ``joma-hierarchy`` — the learning-side claim (Table 1 / Fig. 7): a multilayer post-LN
  transformer trained to classify top-down hierarchical data grows FFN hidden units that
  correlate with the true latents. Alignment score per (layer, latent level) over training.

The measurements are in :mod:`attnlab.theory.joma.alignment`, the figures in :mod:`attnlab.theory.joma.plots`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.theory.joma import plots
from attnlab.theory.joma.alignment import HierarchyConfig, cooccurrence_fit, hierarchy_run, null_bound
from attnlab.theory.joma.hierarchy import HierarchyData, LatentTree, LatentTreeConfig

Z_MAX = 5.0  # largest |z| allowed for one pair: ~1000 pairs, P(|N(0,1)| > 5) ≈ 6e-7 each


TALK_ORDER = 3  # the JoMA part of the talk: then the latent hierarchy of Theorem 5


# --------------------------------------------------------------------------- co-occurrence
@dataclass(frozen=True)
class CooccurrenceConfig:
    tree: LatentTreeConfig = LatentTreeConfig()  # D=4, L=5, B=2: 64 tokens; the preset is swept
    samples: int = 400_000  # P[m = 1] = 1/(D L) = 1/20 (exact): ~20k occurrences per token
    chunks: int = 10  # independent chunks for the batch-means standard error of the slope
    min_count: int = 500  # pairs (l, m) with count(m) below this are left out
    seed: int = 0

    def __post_init__(self):
        if self.chunks < 2 or self.samples < 10 * self.chunks:
            raise ConfigError("need chunks >= 2 and samples >= 10 * chunks for the batch-means standard error")
        if self.min_count < 1:
            raise ConfigError(f"min_count={self.min_count}: use at least 1")


@register(
    "joma-cooccurrence",
    "Theorem 5 data: in a binary latent tree P[l|m] = 1 − H(l,m)/L (exact keep probs) vs constant keep probs.",
    CooccurrenceConfig,
    quick={"samples": 100_000},
)
def run_cooccurrence(cfg: CooccurrenceConfig, ctx) -> Result:
    gen = torch.Generator().manual_seed(cfg.seed)
    fits, trees = {}, {}
    with ctx.progress(2, "joma-cooccurrence") as bar:
        for preset in ("exact", "constant"):
            trees[preset] = tree = LatentTree(replace(cfg.tree, preset=preset))
            fits[preset] = cooccurrence_fit(tree, tree.sample(cfg.samples, gen).tokens, cfg.chunks, cfg.min_count)
            bar.update()
    ex, co = fits["exact"], fits["constant"]
    L = cfg.tree.height
    gap = 1 - 1 / L
    claims = [
        check("exact keep probs: Pearson r of measured P[l|m] vs 1 − H/L (within-class pairs)", ex["pearson"],
              0.99, 0.0, "at_least"),
        check(f"exact keep probs: least-squares slope of measured vs 1 − H/L is 1 (tolerance 4 × batch-means SE "
              f"over {cfg.chunks} chunks)", ex["slope"], 1.0, 4 * ex["slope_se"], "abs").because(
            f"r = {ex['pearson']:.5f}, slope = {ex['slope']:.4f} ± {ex['slope_se']:.4f} (batch-means SE), intercept "
            f"{ex['intercept']:.4f}, max |z| = {ex['max_abs_z']:.2f}."),
        check(f"exact keep probs: every pair within {Z_MAX:g} binomial SE of 1 − H/L (max |z|)", ex["max_abs_z"], Z_MAX,
              0.0, "at_most"),
        check(f"constant keep probs: every pair within {Z_MAX:g} binomial SE of its own law (1 − 1/L)^H (max |z|)",
              co["max_abs_z"], Z_MAX, 0.0, "at_most").because(
            f"constant (κ = 1 − 1/L = {gap:.2f}): against 1 − H/L, r = {co['pearson']:.4f} and slope = "
            f"{co['slope']:.3f}, intercept {co['intercept']:.3f}: (1 − 1/L)^H is convex in H, so it lies ABOVE "
            f"1 − H/L for every H ≥ 2 (H = L−1: {gap ** (L - 1):.3f} vs {1 / L:.3f}); the rank order is kept "
            "(r stays high) but the slope is below 1 and the intercept positive."),
    ]
    plots.cooccurrence(trees, fits, ctx)
    metrics = {p: {k: v for k, v in f.items() if not k.startswith("_")} for p, f in fits.items()}
    metrics["keep_probabilities"] = {p: t.keep.tolist() for p, t in trees.items()}
    summary = (f"Tree D={cfg.tree.num_classes}, L={L}, B={cfg.tree.branching} ({trees['exact'].V} tokens, "
               f"{ex['pairs']} ordered within-class pairs, {cfg.samples} samples per preset): exact keep probabilities "
               f"give P[l|m] = 1 − H/L (r = {ex['pearson']:.5f}, slope {ex['slope']:.4f}), constant ones their own "
               f"law (1 − 1/L)^H (max |z| = {co['max_abs_z']:.2f}), which lies above 1 − H/L.")
    return Result(claims, metrics, {
        "cooccurrence.png": "Measured P[l|m] vs 1 − H(l,m)/L over within-class pairs, exact (left) and constant "
                            "(right) keep probabilities; dashed y = x, red (1 − 1/L)^H."}, summary)


# --------------------------------------------------------------------------- hierarchy training
@register(
    "joma-hierarchy",
    "Theorem 5 / Table 1: FFN units of a 3-layer post-LN transformer align with the latents of hierarchical data.",
    HierarchyConfig,
    quick={"steps": 150, "eval_size": 1024, "n_evals": 6, "bayes_samples": 20_000},
)
def run_hierarchy(cfg: HierarchyConfig, ctx) -> Result:
    with ctx.progress(cfg.steps, "joma-hierarchy") as bar:
        run = hierarchy_run(cfg, cfg.seed, ctx.device, lambda _: bar.update(), with_bayes=True)
    data, evals, marks, train_loss, train_acc, bayes, seconds = run
    plots.hierarchy_scores(data.levels, cfg.model.n_layers, data.classes, evals, marks, train_loss, bayes, ctx)

    levels, n_layers = data.levels, cfg.model.n_layers
    last = evals[cfg.steps]
    S1 = np.array(last["score"])  # (layers, levels)
    tail = max(1, min(50, len(train_acc)))
    best_level = {f"layer {i + 1}": levels[int(np.argmax(S1[i]))] for i in range(n_layers)}
    best_layer = {lvl: int(np.argmax(S1[:, j])) + 1 for j, lvl in enumerate(levels)}
    metrics = {
        "score_table": [{"layer": i + 1, "level": lvl, "score_step0": float(evals[0]["score"][i][j]),
                         "score_final": float(S1[i, j]),
                         "same_class_resample_final": float(last["same_class_resample"][i][j]),
                         "shuffled_final": float(last["shuffled"][i][j])}
                        for i in range(n_layers) for j, lvl in enumerate(levels)],
        "levels": levels,
        "eval_steps": marks,
        "curves": {str(s): {k: v for k, v in e.items()} for s, e in evals.items()},
        "final_accuracy": last["acc"],
        "final_train_accuracy_last50": float(np.mean(train_acc[-tail:])),
        "bayes_accuracy_bracket": list(bayes),  # cross-fitted lower, plug-in upper
        "null_score_bound": null_bound(cfg),
        "best_level_per_layer": best_level,
        "best_layer_per_level": best_layer,
        "attention_entropy_final": last["attention_entropy"],
        "train_seconds": round(seconds, 2),
    }
    m = cfg.model
    trained_on = ("our reading of the authors’ top-down generator" if cfg.variant == "topdown"
                  else "the probabilistic latent tree")
    summary = (
        f"A {m.n_layers}-block post-LN transformer (d = {m.d_model}, FFN {m.d_ffn}, {m.n_heads} heads; the authors' "
        f"d = 1024, FFN 400, lr 1e-5, 10k steps are beyond a 2-core CPU) trained {cfg.steps} Adam steps on "
        f"{trained_on} reaches held-out accuracy {last['acc']:.3f}, and its FFN units align best with "
        + ", ".join(f"{lvl.split(' (')[0]} in layer {k}" for lvl, k in best_layer.items()) + ".")
    figures = {"hierarchy_scores.png": "Alignment score vs training step, one panel per latent level, one curve per "
                                       "layer (solid: true latents; dotted: same-class resample; grey: shuffled); "
                                       "last panel: loss and held-out accuracy."}
    return Result(_hierarchy_claims(cfg, data, evals, bayes), metrics, figures, summary)


def _hierarchy_claims(cfg: HierarchyConfig, data: HierarchyData, evals: dict, bayes: tuple[float, float]) -> list:
    levels, last = data.levels, evals[cfg.steps]
    S0, S1 = np.array(evals[0]["score"]), np.array(last["score"])  # (layers, levels)
    shuffled, null = float(np.max(last["shuffled"])), null_bound(cfg)
    bayes_lo, chance = bayes[0], 1 / data.classes
    claims = []
    for j, lvl in enumerate(levels):
        gain = S1[:, j].max() - S0[:, j].max()
        note = (f"Best layer {int(np.argmax(S1[:, j])) + 1}. Per layer, step 0 → final: "
                + ", ".join(f"layer {i + 1} {S0[i, j]:.3f}→{S1[i, j]:.3f}" for i in range(len(S0)))
                + f". Latents of an independent draw with the same labels (class identity alone), best layer: "
                f"{max(r[j] for r in last['same_class_resample']):.3f}.")
        if gain < cfg.margin:
            note += (f" The best score rises only {gain:.3f} (< {cfg.margin:g}) because it is already "
                     f"{S0[:, j].max():.3f} at random init (layer {int(np.argmax(S0[:, j])) + 1}); max-pooled random "
                     "ReLU units are OR-like detectors of token subsets, and latents one hop above the tokens are "
                     "nearly such ORs. The controlled experiment joma-hierarchy-controls measures this level against "
                     "untrained draws of the same model (random features at matched width) and shuffled latents, "
                     "over seeds, with the order in which the levels are learned.")
        claims.append(check(f"{lvl}: best-layer score after training exceeds its step-0 best "
                            f"by >= {cfg.margin:g} (gain)", gain, cfg.margin, 0.0, "at_least").because(note))
    claims += [
        check("control: score against shuffled latents stays at the null level, <= sqrt(2 ln F / N) "
              "(max over layers and levels, after training)", shuffled, null, 0.0, "at_most").because(
            "Score = mean over a level's latents of the best (signed) Pearson correlation with any FFN unit, units "
            f"max-pooled over non-pad positions, on {cfg.eval_size} held-out samples."),
        check(f"held-out accuracy well above chance 1/{data.classes}: closes at least half the gap from chance to the "
              "Bayes-optimal accuracy (its cross-fitted lower bound)", last["acc"], chance + 0.5 * (bayes_lo - chance),
              0.0, "at_least").because(
            f"Chance {chance:.3f}; Bayes-optimal between {bayes_lo:.3f} and {bayes[1]:.3f}, bracketed from "
            f"{cfg.bayes_samples} samples."),
    ]
    return claims
