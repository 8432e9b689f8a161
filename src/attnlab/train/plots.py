"""Figures of a training run, from its ``metrics.jsonl`` lines and attention snapshots.

Each function draws into axes it is given, so experiments compose them into one figure and
``attnlab train`` uses :func:`training_figure` for a run folder.
"""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt


def layer_entropy(lines: list[dict]) -> np.ndarray:
    """(steps, layers): attention entropy per layer, averaged over heads."""
    return np.array([[float(np.mean(h)) for h in line["entropy"]] for line in lines])


def plot_entropy(ax, lines: list[dict], title: str = "", max_entropy: float | None = None) -> None:
    """One curve per layer; dotted line at the causal mask's maximum entropy, if given."""
    steps = [line["step"] for line in lines]
    h = layer_entropy(lines)
    cmap = plt.get_cmap("viridis")
    for layer in range(h.shape[1]):
        ax.plot(steps, h[:, layer], color=cmap(layer / max(1, h.shape[1] - 1)) if h.shape[1] > 1 else "C0",
                label=f"layer {layer}")
    if max_entropy is not None:
        ax.axhline(max_entropy, color="grey", ls=":", lw=1, label="uniform (causal)")
    ax.set_xlabel("minibatch")
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
