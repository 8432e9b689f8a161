"""``scansnap-fig7``: the layer-0 attention of the tutorial transformer becomes sparse on WikiText-2.

WikiText-2's train split is not available offline here, so the default trains on its
validation split and evaluates on its test split (any files can be given with --set).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.train.plots import layer_entropy, plot_attention_row
from attnlab.train.runs import data_summary, load_wordlevel, train_depths
from attnlab.train.trainer import TrainConfig
from attnlab.core.plotting import plt


@dataclass(frozen=True)
class Fig7Config:
    train: str = "wikitext-2/valid.txt"  # stands in for the unavailable train split
    valid: str = "wikitext-2/test.txt"
    max_vocab: int = 0  # 0: every training word type
    layers: tuple[int, ...] = (1, 3)
    dropout: float = 0.3
    lr: float = 5.0
    group_lrs: tuple[str, ...] = ("layers.0.linear*=10",)  # the layer-0 FFN at lr 10
    steps: int = 1500
    snapshot_steps: tuple[int, ...] = (0, 500, 1000, 1500)
    track_every: int = 50
    eval_batches: int = 50
    max_entropy_ratio: float = 0.8  # "well below": layer-0 entropy at the end <= 0.8 x at step 0
    seed: int = 0

    def __post_init__(self):
        if not self.layers or min(self.layers) < 1:
            raise ConfigError(f"layers={self.layers}: give layer counts >= 1, e.g. layers=1,3")
        if self.max_vocab < 0:
            raise ConfigError(f"max_vocab={self.max_vocab}: use 0 (no limit) or a positive size")
        if self.steps < 1 or any(not 0 <= s <= self.steps for s in self.snapshot_steps):
            raise ConfigError(f"snapshot_steps={self.snapshot_steps} must lie within 0..steps={self.steps}")


@register(
    "scansnap-fig7",
    "Fig. 7 (WikiText-2): the tutorial transformer's layer-0 attention map becomes sparse over training (1 and 3 layers).",
    Fig7Config,
    quick={"layers": (1,), "steps": 200, "snapshot_steps": (0, 100, 200), "max_vocab": 5000, "eval_batches": 10},
)
def run_fig7(cfg: Fig7Config, ctx) -> Result:
    vocab, train_ids, valid_ids = load_wordlevel(cfg.train, cfg.valid, cfg.max_vocab)
    tcfg = TrainConfig(optimizer="sgd", lr=cfg.lr, group_lrs=cfg.group_lrs, steps=cfg.steps,
                       track_every=cfg.track_every, eval_every=cfg.steps, eval_batches=cfg.eval_batches,
                       snapshot_steps=cfg.snapshot_steps, checkpoint_every=cfg.steps, seed=cfg.seed)
    runs = train_depths(cfg.layers, len(vocab), cfg.dropout, tcfg, train_ids, valid_ids, ctx, cfg.seed)
    claims, table = [], {}
    for n_layers, (lines, _) in runs.items():
        h0, h1 = lines[0]["entropy"][0][0], lines[-1]["entropy"][0][0]
        table[n_layers] = {"entropy_start": h0, "entropy_end": h1, "valid_loss_start": lines[0]["valid_loss"],
                           "valid_loss_end": lines[-1]["valid_loss"]}
        claims.append(check(f"{n_layers}-layer model: layer-0 attention entropy at step {cfg.steps} is well below "
                            f"step 0 (ratio end/start; {h0:.3f} -> {h1:.3f} nats)", h1 / h0, cfg.max_entropy_ratio,
                            0.0, "at_most"))
    _figure(cfg, ctx, runs)
    summary = (data_summary(cfg.train, cfg.valid, vocab, train_ids, valid_ids)
               + f"; SGD lr {cfg.lr:g} with {', '.join(cfg.group_lrs) or 'no'} "
               f"group rates, clip 0.5, batch 20 x bptt 35, dropout {cfg.dropout}, {cfg.steps} steps. "
               + " ".join(f"{n} layer(s): layer-0 entropy {t['entropy_start']:.3f} -> {t['entropy_end']:.3f}, "
                          f"valid loss {t['valid_loss_start']:.3f} -> {t['valid_loss_end']:.3f}."
                          for n, t in table.items()))
    return Result(claims, {"runs": {str(k): v for k, v in table.items()}}, {
        "fig7.png": "Layer-0 attention map (first sequence of the batch, 35x35, causal) at the snapshot steps, one row "
                    "per model depth; right: layer-0 entropy over training."}, summary)


def _figure(cfg: Fig7Config, ctx, runs) -> None:
    steps = sorted(cfg.snapshot_steps)
    rows = len(runs)
    fig, axes = plt.subplots(rows, len(steps) + 1, figsize=(3 * (len(steps) + 1), 3 * rows), squeeze=False,
                             layout="constrained")
    for r, (n_layers, (lines, snaps)) in enumerate(runs.items()):
        plot_attention_row(axes[r, :-1], snaps, steps, label=f"{n_layers}L, ")
        ax = axes[r, -1]
        ax.plot([line["step"] for line in lines], layer_entropy(lines)[:, 0], label="layer 0")
        ax.set_xlabel("iteration")
        ax.set_ylabel("attention entropy (nats)")
        ax.set_title(f"{n_layers}-layer model", fontsize=9)
    ctx.savefig(fig, "fig7.png")
