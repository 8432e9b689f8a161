"""Figures of the sinks-from-scratch study: the streaming table as bars, and sink emergence over training."""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt


def table_figure(table: dict, window: int, published: dict):
    """Left: our PPL per variant and cache n+(W-n) (log scale); right: the published 160M table."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), layout="constrained")
    for ax, data, w, title in ((axes[0], table, window, "measured"), (axes[1], published, 1024, "StreamingLLM, 160M")):
        variants = list(data)
        sinks = sorted({n for row in data.values() for n in row})
        width = 0.8 / len(variants)
        for i, v in enumerate(variants):
            x = np.arange(len(sinks)) + i * width
            ax.bar(x, [data[v].get(n, np.nan) for n in sinks], width, label=v)
        ax.set_xticks(np.arange(len(sinks)) + 0.4 - width / 2, [f"{n}+{w - n}" for n in sinks])
        ax.set(yscale="log", ylabel="streaming PPL", xlabel="cache: sinks + recent", title=title)
        ax.legend(fontsize=7)
    return fig


def _curve(lines: list[dict], key) -> tuple[np.ndarray, np.ndarray]:
    steps = np.array([line["step"] for line in lines])
    return steps, np.array([key(line) for line in lines])


def emergence_figure(runs: dict[str, list[dict]], deep_from: int):
    """Per variant over training: deep-layer first-token share, the strongest head's importance_0 (Gu et al.'s
    Sink_0^0.3 counts the heads above 0.3), max first-position norm ratio."""
    panels = (
        (lambda line: float(np.mean(line["first_token_share"][deep_from:])),
         f"first-token share, layers >= {deep_from}", "linear"),
        (lambda line: line["sink_importance_max"], "strongest head's mean attention to token 0 (sink: > 0.3)",
         "linear"),
        (lambda line: max(line["norm0_ratio"]), "max over layers of |h_0| / mean |h_i|", "log"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6), layout="constrained")
    for ax, (key, title, scale) in zip(axes, panels):
        for v, lines in runs.items():
            ax.plot(*_curve(lines, key), label=v, lw=1.2)
        ax.set(xlabel="training step", title=title, yscale=scale)
    axes[1].axhline(0.3, color="k", ls=":", lw=1)
    axes[0].legend(fontsize=7)
    return fig


def lever_figure(runs: dict[str, list[dict]]):
    """Per sweep cell over training: the strongest head's importance_0, the mean first-token share, the loss."""
    panels = ((lambda line: line["sink_importance_max"], "strongest head's mean attention to token 0 (sink: > 0.3)"),
              (lambda line: float(np.mean(line["first_token_share"])), "first-token share, all layers"),
              (lambda line: line["train_loss"], "training loss"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6), layout="constrained")
    for ax, (key, title) in zip(axes, panels):
        for name, lines in runs.items():
            kept = [line for line in lines if key(line) is not None]
            ax.plot(*_curve(kept, key), label=name, lw=1.2)
        ax.set(xlabel="training step", title=title)
    axes[0].axhline(0.3, color="k", ls=":", lw=1)
    axes[0].legend(fontsize=7)
    return fig


def backcopy_figure(tracks: dict[str, list[dict]], sink_min: float):
    """Per BB run over training: attention to the first token (dormant solid, active dashed), the first token's
    value and residual norm ratios (the largest over layers), and the loss over the Bayes floor."""
    def series(track, key):
        return np.array([t["step"] for t in track]), np.array([key(t) for t in track])

    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8), layout="constrained")
    for i, (name, track) in enumerate(tracks.items()):
        color = f"C{i}"
        axes[0].plot(*series(track, lambda t: t["layers"][0]["dormant"]), color=color, label=name, lw=1.2)
        axes[0].plot(*series(track, lambda t: t["layers"][0]["active"]), color=color, ls="--", lw=0.8)
        axes[1].plot(*series(track, lambda t: t["layers"][0]["value_ratio"]), color=color, lw=1.2)
        axes[2].plot(*series(track, lambda t: max(x["resid_ratio"] for x in t["layers"])), color=color, lw=1.2)
        axes[3].plot(*series(track, lambda t: t["loss"] - t["bayes"]), color=color, lw=1.2)
    axes[0].axhline(sink_min, color="k", ls=":", lw=1)
    titles = ("attention to BOS: dormant (solid), active (dashed)", "BOS value norm / others' median (layer 0)",
              "BOS residual norm / others' median (max over layers)", "loss - Bayes floor")
    for ax, title in zip(axes, titles):
        ax.set(xlabel="training step", title=title)
    axes[2].set_yscale("log")
    axes[3].set_yscale("log")
    axes[0].legend(fontsize=7)
    return fig


def backcopy_maps(attn, seq, task):
    """One head's attention map (S, S) on one BB sequence, trigger queries marked on the axis."""
    fig, ax = plt.subplots(figsize=(6.2, 5.6), layout="constrained")
    ax.imshow(attn.float().cpu().numpy(), cmap="viridis", vmin=0, vmax=1)
    names = ["BOS" if int(t) == task.bos else repr(task.symbols[int(t)])[1:-1].replace(" ", "␣") for t in seq]
    trig = task.is_trigger(seq).tolist()
    ax.set_yticks(range(len(names)), [f"{n}*" if t else n for n, t in zip(names, trig)], fontsize=6)
    ax.set_xticks(range(len(names)), names, fontsize=6, rotation=90)
    ax.set(xlabel="key", ylabel="query (* a trigger: it copies the token before)", title="attention at the end")
    return fig
