"""``scansnap-fig7``: the layer-0 attention of the tutorial transformer becomes sparse on WikiText-2.

WikiText-2's train split is not available offline here, so the default trains on its
validation split and evaluates on its test split (any files can be given with --set).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.train.plots import depth_maps_figure
from attnlab.train.runs import WordLevelConfig, setup_text, sweep_depths
from attnlab.train.trainer import TrainConfig


@dataclass(frozen=True)
class Fig7Config(WordLevelConfig):
    group_lrs: tuple[str, ...] = ("layers.0.linear*=10",)  # the layer-0 FFN at lr 10
    steps: int = 1500
    snapshot_steps: tuple[int, ...] = (0, 500, 1000, 1500)
    track_every: int = 50
    eval_batches: int = 50
    max_entropy_ratio: float = 0.8  # "well below": layer-0 entropy at the end <= 0.8 x at step 0
    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.steps < 1 or any(not 0 <= s <= self.steps for s in self.snapshot_steps):
            raise ConfigError(f"snapshot_steps={self.snapshot_steps} must lie within 0..steps={self.steps}")


@register(
    "scansnap-fig7",
    "Fig. 7 (WikiText-2): the tutorial transformer's layer-0 attention map becomes sparse over training "
    "(1 and 3 layers).",
    Fig7Config,
    quick={"layers": (1,), "steps": 200, "snapshot_steps": (0, 100, 200), "max_vocab": 5000, "eval_batches": 10},
)
def run_fig7(cfg: Fig7Config, ctx) -> Result:
    tcfg = TrainConfig(optimizer="sgd", lr=cfg.lr, group_lrs=cfg.group_lrs, steps=cfg.steps,
                       track_every=cfg.track_every, eval_every=cfg.steps, eval_batches=cfg.eval_batches,
                       snapshot_steps=cfg.snapshot_steps, checkpoint_every=cfg.steps, seed=cfg.seed)
    sweep = sweep_depths(cfg, tcfg, ctx)
    claims, table = [], {}
    for n_layers, (lines, _) in sweep.runs.items():
        h0, h1 = lines[0]["entropy"][0][0], lines[-1]["entropy"][0][0]
        table[n_layers] = {"entropy_start": h0, "entropy_end": h1, "valid_loss_start": lines[0]["valid_loss"],
                           "valid_loss_end": lines[-1]["valid_loss"]}
        claims.append(check(f"{n_layers}-layer model: layer-0 attention entropy at step {cfg.steps} is well below "
                            f"step 0 (ratio end/start; {h0:.3f} -> {h1:.3f} nats)", h1 / h0, cfg.max_entropy_ratio,
                            0.0, "at_most"))
    ctx.savefig(depth_maps_figure(sweep.runs, sorted(cfg.snapshot_steps)), "fig7.png")
    summary = (sweep.about + f"; SGD lr {cfg.lr:g} with {', '.join(cfg.group_lrs) or 'no'} "
               f"group rates, {setup_text(tcfg)}, dropout {cfg.dropout}, {cfg.steps} steps. "
               + " ".join(f"{n} layer(s): layer-0 entropy {t['entropy_start']:.3f} -> {t['entropy_end']:.3f}, "
                          f"valid loss {t['valid_loss_start']:.3f} -> {t['valid_loss_end']:.3f}."
                          for n, t in table.items()))
    return Result(claims, {"runs": {str(k): v for k, v in table.items()}}, {
        "fig7.png": "Layer-0 attention map (first sequence of the batch, 35x35, causal) at the snapshot steps, one row "
                    "per model depth; right: layer-0 entropy over training."}, summary)
