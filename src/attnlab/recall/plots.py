"""Figures of ``streameval``: accuracy per cache and distance (the seed's table as a heat map), and, for the
caches that keep slots by a per-head score (H2O family, knorm), how often the value was still held when the
answer began."""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt


def _by_distance(answers: list[dict], distances, value) -> list[float]:
    cells = [[value(a) for a in answers if a["nominal"] == d] for d in distances]
    return [float(np.mean(c)) if c else float("nan") for c in cells]


def accuracy_figure(streams: dict[str, dict], distances):
    """Rows: caches; columns: line distances (mean token distance below); cells: accuracy in %."""
    names = list(streams)
    acc = np.array([_by_distance(streams[k]["answers"], distances, lambda a: a["correct"]) for k in names]) * 100
    tokens = _by_distance(next(iter(streams.values()))["answers"], distances, lambda a: a["token_distance"])
    fig, ax = plt.subplots(figsize=(1.3 * len(distances) + 3, 0.5 * len(names) + 1.6), layout="constrained")
    im = ax.imshow(acc, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for (i, j), v in np.ndenumerate(acc):
        ax.text(j, i, "—" if np.isnan(v) else f"{v:.0f}", ha="center", va="center", color="w" if v < 60 else "k")
    ax.set_xticks(range(len(distances)), [f"{d} lines\n{t:.0f} tok" for d, t in zip(distances, tokens)])
    ax.set_yticks(range(len(names)), names)
    ax.set(title="StreamEval accuracy (%) by query-answer distance")
    fig.colorbar(im, ax=ax, label="accuracy (%)")
    return fig


def kept_figure(streams: dict[str, dict], names: list[str], distances):
    """For each cache in ``names`` (those that keep slots by a per-head score): share of heads holding the
    value, by distance, right vs wrong answers."""
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), layout="constrained", squeeze=False)
    for ax, k in zip(axes[0], names):
        answers = streams[k]["answers"]
        for ok, style in ((True, "o-"), (False, "x--")):
            sub = [a for a in answers if a["correct"] is ok]
            ax.plot(distances, _by_distance(sub, distances, lambda a: a["kept"]), style,
                    label="right answers" if ok else "wrong answers")
        ax.set(xscale="log", xlabel="distance (lines)", ylabel="share of heads holding the value", title=k,
               ylim=(-0.05, 1.05))
        ax.set_xticks(list(distances), [str(d) for d in distances])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    return fig


def rouge_figure(mean: dict[str, dict]):
    """Grouped bars: ROUGE-1/2/L per cache; the repeated-trigram share beside them."""
    names, keys = list(mean), ("rouge1", "rouge2", "rougeL")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained", width_ratios=(3, 1.4))
    x, w = np.arange(len(names)), 0.8 / len(keys)
    for i, k in enumerate(keys):
        ax.bar(x + (i - 1) * w, [mean[n][k] for n in names], w, label=k.replace("rouge", "ROUGE-"))
    ax.set_xticks(x, names)
    ax.set(ylabel="F-measure", title="XSum: ROUGE per cache")
    ax.legend(fontsize=8)
    ax2.bar(x, [mean[n]["repeated"] for n in names], color="grey")
    ax2.set_xticks(x, names, rotation=30, ha="right")
    ax2.set(ylabel="share", title="repeated word trigrams")
    return fig


def mqar_distance_figure(by_distance: dict[str, dict[int, float]], budget: int, width: int):
    """Recall vs distance (bin starts, tokens), one line per cache; the budget as a dotted line."""
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for i, (name, d) in enumerate(by_distance.items()):
        starts = sorted(d)  # dashes by turn: caches that recall alike (h2o, sinks+h2o) stay told apart
        ax.plot([b + width / 2 for b in starts], [d[b] for b in starts], marker="o", ms=3, label=name,
                lw=2.5 if name == "full" else 1.5, ls=("-", "--", ":", "-.")[i % 4])
    ax.axvline(budget, ls=":", c="k", lw=1)
    ax.set(xlabel="distance from the query back to its pair (tokens)", ylabel="recall", ylim=(-0.03, 1.03),
           title=f"MQAR recall under eviction (budget {budget})")
    ax.legend(fontsize=8)
    return fig


def mqar_kept_figure(first: dict[str, list[float]], pairs: int, gap: int):
    """Rows: caches; columns: stream positions; cells: share of (layer, head, sequence) holding the position at
    the first query. The pairs region (after BOS) and the filler are marked."""
    names = list(first)
    held = np.array([first[n] for n in names])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(names) + 1.4), layout="constrained")
    im = ax.imshow(held, cmap="magma", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for edge in (0.5, 2 * pairs + 0.5, 2 * pairs + gap + 0.5):  # BOS | pairs | filler | queries
        ax.axvline(edge, c="c", lw=0.8)
    ax.set_yticks(range(len(names)), names)
    ax.set(xlabel=f"stream position (BOS, {pairs} pairs, {gap} filler, the queries)",
           title="what each cache holds at the first query")
    fig.colorbar(im, ax=ax, label="share held")
    return fig
