"""Figures the probes share: a layer x head heatmap, and per-layer lines of one measure under variants."""
from __future__ import annotations

from attnlab.core.plotting import plt


def layer_head_heatmap(ctx, grid: list[list[float]], name: str, title: str, label: str,
                       vmin: float = 0.0, vmax: float = 1.0) -> str:
    """``grid``: (layers, heads) values as nested lists; layer 0 at the top, one column per head."""
    n_layers, n_heads = len(grid), len(grid[0])
    fig, ax = plt.subplots(figsize=(2.0 + 0.28 * n_heads, 1.2 + 0.22 * n_layers), layout="constrained")
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
    ax.set(xlabel="head", ylabel="layer", title=title)
    ax.set_xticks(range(0, n_heads, max(1, n_heads // 8)))
    ax.set_yticks(range(0, n_layers, max(1, n_layers // 10)))
    fig.colorbar(im, ax=ax, label=label)
    return ctx.savefig(fig, name)


def per_layer_lines(ctx, series: dict[str, list[float]], name: str, title: str, ylabel: str,
                    reference: float | None = None, reference_label: str = "") -> str:
    """One line per variant (label -> one value per layer), with an optional dotted reference level."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
    for i, (label, values) in enumerate(series.items()):
        ax.plot(range(len(values)), values, "o-" if i == 0 else "s--", ms=3.5, label=label)
    if reference is not None:
        ax.axhline(reference, color="grey", ls=":", lw=1, label=reference_label)
    ax.set(xlabel="layer", ylabel=ylabel, title=title, ylim=(0, 1.02))
    ax.legend(fontsize=7)
    return ctx.savefig(fig, name)
