"""``joma-hierarchy-controls``: is the hierarchy *learned*, measured against chance, and which level comes first?

``joma-hierarchy`` finds the lowest latent level (nearest the tokens) aligned already at random init (0.64) and
training adding only 0.07. Its step-0 score is one random draw, so "learned" has no chance level to stand on.
Here, on the same data and model (matched width: the same FFN units):

- a *random-feature* baseline: the alignment score of ``random_inits`` untrained models (fresh draws of the
  same architecture: what random ReLU units give by themselves), its mean and spread per level;
- a *shuffled-latent* baseline: the trained models scored against the latents shuffled across samples;
- ``seeds`` trained models: per level, the best layer's final score as a z-score against the random-feature
  baseline, and the share of the headroom above it that training gained, (trained − random)/(1 − random);
- the timing, per seed: the step at which each level's best-layer score first covers half of its gain over
  training (interpolated in log-step between evaluations); JoMA's claim: lower levels first.

The claims are fixed before the first run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check, finding
from attnlab.experiments.registry import Result, register
from attnlab.theory.joma.alignment import HierarchyConfig, evaluate, hierarchy_run, null_bound
from attnlab.theory.joma.hierarchy import HierarchyData
from attnlab.theory.joma.transformer import PostLNTransformer


@dataclass(frozen=True)
class HierarchyControlsConfig:
    setup: HierarchyConfig = HierarchyConfig(n_evals=17)  # joma-hierarchy's run, evaluated twice as often
    seeds: int = 4
    random_inits: int = 16
    z_min: float = 3.0  # "learned": the trained score this many baseline SDs above the random features' mean
    order_min: float = 0.75  # "lower levels first" in at least this share of the seeds

    def __post_init__(self):
        if self.seeds < 1 or self.random_inits < 2 or self.z_min <= 0 or not 0 < self.order_min <= 1:
            raise ConfigError("need seeds >= 1, random_inits >= 2, z_min > 0 and order_min in (0, 1]")


def half_time(steps: list[int], curve: np.ndarray) -> float:
    """The first step at which ``curve`` covers half of its largest gain over its start, interpolated in
    log-step between evaluations (step 0 counts as the first evaluated step after it)."""
    target = curve[0] + 0.5 * (curve.max() - curve[0])
    i = int(np.argmax(curve >= target))
    if i == 0:
        return float(steps[0])
    lo = np.log(max(steps[i - 1], steps[1] / 2))  # step 0 sits half a log-step before the first evaluation
    frac = (target - curve[i - 1]) / max(curve[i] - curve[i - 1], 1e-12)
    return float(np.exp(lo + frac * (np.log(steps[i]) - lo)))


def random_features(cfg: HierarchyConfig, inits: int) -> np.ndarray:
    """(inits, levels): the best layer's alignment score of untrained models, each a fresh draw (seeds 1000+)."""
    data = HierarchyData(cfg.variant, cfg.data, cfg.tree)
    ev = data.draw(cfg.eval_size, torch.Generator().manual_seed(cfg.seed + 10_000))  # hierarchy_run's eval batch
    out = []
    for k in range(inits):
        torch.manual_seed(1000 + k)
        model = PostLNTransformer(cfg.model, data.vocab, cfg.data.seq_len, data.classes, data.pad_id).eval()
        out.append(np.array(evaluate(model, ev, {})["score"]).max(0))
    return np.array(out)


@register("joma-hierarchy-controls", "JoMA's latent hierarchy against chance: random-feature and shuffled-latent "
          "baselines at matched width, and which level is learned first, over seeds", HierarchyControlsConfig,
          quick={"seeds": 2, "random_inits": 4, "setup.steps": 150, "setup.eval_size": 1024, "setup.n_evals": 8})
def run_controls(cfg: HierarchyControlsConfig, ctx) -> Result:
    from attnlab.theory.joma.plots import hierarchy_controls

    s = cfg.setup
    with ctx.progress(cfg.seeds * s.steps, "joma-hierarchy-controls") as bar:
        runs = [hierarchy_run(s, s.seed + k, ctx.device, lambda _: bar.update()) for k in range(cfg.seeds)]
        base = random_features(s, cfg.random_inits)  # (inits, levels)
    levels = runs[0].data.levels
    curves = [np.array([np.array(r.evals[m]["score"]).max(0) for m in r.marks]) for r in runs]  # (marks, levels)
    trained = np.array([c[-1] for c in curves])  # (seeds, levels)
    shuffled = np.array([np.array(r.evals[r.marks[-1]]["shuffled"]).max(0) for r in runs])
    mu, sd = base.mean(0), base.std(0, ddof=1)
    z = (np.median(trained, 0) - mu) / sd
    share = (np.median(trained, 0) - mu) / (1 - mu)
    t_half = np.array([[half_time(r.marks, c[:, j]) for j in range(len(levels))] for r, c in zip(runs, curves)])
    hierarchy_controls(levels, runs[0].marks, curves, base, shuffled, t_half, ctx)
    claims = []
    for j, lvl in enumerate(levels):
        claims.append(check(f"{lvl}: learned beyond matched-width random features: the trained best-layer score "
                            f"(median over {cfg.seeds} seeds) is >= {cfg.z_min:g} SDs of {cfg.random_inits} untrained "
                            "models above their mean (z)", float(z[j]), cfg.z_min, 0.0, "at_least").failing_because(
            f"untrained draws score {mu[j]:.3f} ± {sd[j]:.3f}; the trained seeds "
            f"{', '.join(f'{v:.3f}' for v in trained[:, j])}: within {cfg.z_min:g} SDs of random ReLU features of "
            "the same width, so this level's alignment is not shown to be learned"))
        claims.append(finding(f"{lvl}: share of the headroom above random features that training gains, "
                              "(trained − random)/(1 − random), median seed", float(share[j])))
    claims.append(check("control: the trained models against shuffled latents stay at the null level, "
                        "<= sqrt(2 ln F / N) (max over seeds, layers and levels)", float(shuffled.max()),
                        null_bound(s), 0.0, "at_most"))
    if len(levels) > 1:
        first = t_half[:, -1] < t_half[:, 0]  # the lowest level (nearest the tokens) before the top one
        gain = [np.median([c[:, j].max() - c[0, j] for c in curves]) for j in (0, -1)]
        claims.append(check(f"JoMA: lower levels are learned first: {levels[-1]} reaches half its gain before "
                            f"{levels[0]} (share of seeds)", float(first.mean()), cfg.order_min, 0.0,
                            "at_least").failing_because(
            "half-gain steps per seed (lowest, top): "
            + ", ".join(f"({a:.0f}, {b:.0f})" for a, b in zip(t_half[:, -1], t_half[:, 0]))
            + f"; the median gain over training is {gain[1]:.3f} for the lowest level and {gain[0]:.3f} for the top "
            + (f"one: the lowest level starts near its final score (random features already reach {mu[-1]:.3f}), so "
               "the time it takes to cover half of a small gain says little about which level the training builds "
               "first" if gain[1] < gain[0] / 2 else
               "one: both gain comparably and the top level gets there first in most seeds, the reverse of JoMA's "
               "order")))
    summary = (f"{cfg.seeds} seeds of joma-hierarchy's model and data ({s.steps} steps), {cfg.random_inits} untrained "
               "draws of the same model as the random-feature baseline. Per level (top first): "
               + "; ".join(f"{lvl}: random features {mu[j]:.3f} ± {sd[j]:.3f}, trained {np.median(trained[:, j]):.3f} "
                           f"(z = {z[j]:.1f}), shuffled latents {shuffled[:, j].max():.3f}, half-gain step median "
                           f"{np.median(t_half[:, j]):.0f}" for j, lvl in enumerate(levels)) + ".")
    metrics = {"levels": levels, "random_features": base.tolist(), "trained": trained.tolist(),
               "shuffled": shuffled.tolist(), "z": z.tolist(), "headroom_share": share.tolist(),
               "half_gain_step": t_half.tolist(), "eval_steps": runs[0].marks,
               "accuracy": [r.evals[r.marks[-1]]["acc"] for r in runs]}
    return Result(claims, metrics, {"hierarchy_controls.png": (
        "Per level: the best layer's alignment score along training for each seed, against the band of untrained "
        "models (random features, mean ± 2 SD) and the trained models' score against shuffled latents; right: "
        "the step at which each level covers half its gain, per seed.")}, summary)
