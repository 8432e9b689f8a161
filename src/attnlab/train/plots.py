"""Figures of training runs, from their ``metrics.jsonl`` lines and attention snapshots.

The ``plot_*`` functions draw into axes they are given; the ``*_figure`` functions compose them:
:func:`training_figure` for an ``attnlab train`` run folder, :func:`depth_maps_figure` and
:func:`depth_entropy_figure` for the real-text experiments' runs, one per model depth
(``runs``: {depth: (metrics lines, snapshots)}, as :func:`attnlab.train.runs.sweep_depths` gives).
"""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt


def layer_entropy(lines: list[dict]) -> np.ndarray:
    """(steps, layers): attention entropy per layer, averaged over heads."""
    return np.array([[float(np.mean(h)) for h in line["entropy"]] for line in lines])


def uniform_causal_entropy(t: int) -> float:
    """Mean entropy of uniform causal attention over t queries: (1/t) Σ_i ln i, the top of an entropy axis."""
    return float(np.mean(np.log(np.arange(1, t + 1))))


def plot_entropy(ax, lines: list[dict], title: str = "", max_entropy: float | None = None,
                 layers: int | None = None, xlabel: str = "minibatch") -> None:
    """One curve per layer (the first ``layers`` only, if given); dotted line at the causal mask's
    maximum entropy, if given."""
    steps = [line["step"] for line in lines]
    h = layer_entropy(lines)[:, :layers]  # (steps, layers)
    cmap = plt.get_cmap("viridis")
    for layer in range(h.shape[1]):
        ax.plot(steps, h[:, layer], color=cmap(layer / max(1, h.shape[1] - 1)) if h.shape[1] > 1 else "C0",
                label=f"layer {layer}")
    if max_entropy is not None:
        ax.axhline(max_entropy, color="grey", ls=":", lw=1, label="uniform (causal)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("attention entropy (nats)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="best")


def plot_losses(ax, lines: list[dict], label: str = "", color=None) -> None:
    """Training loss (mean over each interval) solid, validation loss dashed with markers."""
    tr = [(x["step"], x["train_loss"]) for x in lines if x.get("train_loss") is not None]
    va = [(x["step"], x["valid_loss"]) for x in lines if x.get("valid_loss") is not None]
    prefix = f"{label} " if label else ""
    if tr:
        line, = ax.plot(*zip(*tr), color=color, label=f"{prefix}train")
        color = line.get_color()
    if va:
        ax.plot(*zip(*va), "o--", color=color, ms=3, label=f"{prefix}valid")
    ax.set_xlabel("minibatch")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend(fontsize=7)


def plot_attention_row(axes, snapshots: dict[int, list], steps, layer: int = 0, head: int = 0, label: str = "") -> None:
    """The probe's first sequence: attention map of ``layer``/``head`` at each step, one axis each."""
    for ax, s in zip(axes, steps):
        ax.imshow(snapshots[s][layer][head].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{label}iter {s}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])


def training_figure(lines: list[dict], snapshots: dict[int, list], path, title: str = "") -> None:
    """Entropy per layer and losses side by side; below, layer-0 maps at the snapshot steps."""
    steps = sorted(snapshots)
    rows = 2 if steps else 1
    cols = max(2, len(steps))
    fig = plt.figure(figsize=(3.2 * cols, 3.2 * rows), layout="constrained")
    grid = fig.add_gridspec(rows, cols)
    plot_entropy(fig.add_subplot(grid[0, : cols // 2]), lines, "attention entropy per layer")
    plot_losses(fig.add_subplot(grid[0, cols // 2 :]), lines)
    if steps:
        plot_attention_row([fig.add_subplot(grid[1, c]) for c in range(len(steps))], snapshots, steps,
                           label="layer 0, ")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _panel_grid(rows: int, cols: int, width: float, height: float):
    """(figure, axes (rows, cols)) with panels of ``width`` x ``height`` inches."""
    return plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")


def depth_maps_figure(runs: dict[int, tuple[list[dict], dict]], steps) -> "plt.Figure":
    """Scan&Snap Fig. 7: per depth, one row of layer-0 attention maps at ``steps`` and the
    layer-0 entropy curve at its end."""
    fig, axes = _panel_grid(len(runs), len(steps) + 1, 3, 3)
    for r, (n_layers, (lines, snaps)) in enumerate(runs.items()):
        plot_attention_row(axes[r, :-1], snaps, steps, label=f"{n_layers}L, ")
        plot_entropy(axes[r, -1], lines, f"{n_layers}-layer model", layers=1, xlabel="iteration")
    return fig


def depth_entropy_figure(runs: dict[int, tuple[list[dict], dict]], probe_len: int) -> "plt.Figure":
    """JoMA's real-text figure: per depth, every layer's entropy curve (dotted: uniform causal
    attention over the ``probe_len``-token probe); last panel: every depth's losses."""
    fig, axes = _panel_grid(1, len(runs) + 1, 3.6, 3.3)
    uniform = uniform_causal_entropy(probe_len)
    for k, (ax, (depth, (lines, _))) in enumerate(zip(axes[0], runs.items())):
        plot_entropy(ax, lines, f"{depth} layer{'s' if depth > 1 else ''}", max_entropy=uniform)
        plot_losses(axes[0, -1], lines, f"{depth}L", color=f"C{k}")
    axes[0, -1].set_title("loss", fontsize=9)
    return fig
