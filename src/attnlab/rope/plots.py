"""Figures of the RoPE-scaling runs: passkey accuracy heat-maps, perplexity against context length,
and perplexity against fine-tuning steps."""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt
from attnlab.evals.longppl import LongPPL
from attnlab.evals.passkey import PasskeyResult, accuracy_grid


def passkey_figure(ctx, results: dict[str, list[PasskeyResult]], trained: int, name: str = "passkey.png") -> None:
    """One accuracy heat-map (key depth x prompt length) per method."""
    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results) + 1, 3.2), layout="constrained",
                             squeeze=False)
    for ax, (label, rows) in zip(axes[0], results.items()):
        lengths, depths, acc = accuracy_grid(rows)
        im = ax.imshow(acc, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="lower")
        ax.set_xticks(range(len(lengths)), [f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        for i in range(len(depths)):
            for j in range(len(lengths)):
                ax.text(j, i, f"{acc[i, j]:.0%}", ha="center", va="center", fontsize=7)
        ax.set(xlabel=f"prompt tokens (trained {trained})", title=f"{label}: {np.mean(acc):.0%}")
    axes[0][0].set_ylabel("key depth")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
    ctx.savefig(fig, name)


def longppl_figure(ctx, curves: dict[str, LongPPL], trained: int, name: str = "longppl.png") -> None:
    """Sliding-window PPL against context length, one curve per method."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    for label, r in curves.items():
        ax.plot(r.lengths, [r.ppl(n) for n in r.lengths], "o-", label=label)
    ax.axvline(trained, color="k", ls=":", lw=1, label=f"trained context {trained}")
    ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="PPL (last 256 tokens of each window)",
           title="long-context perplexity")
    lengths = next(iter(curves.values())).lengths
    ax.minorticks_off()  # the log axis' own labels would overprint the lengths
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.legend(fontsize=7)
    ctx.savefig(fig, name)


def extension_figure(ctx, curves: dict[str, tuple[list[int], list[float]]], rows: dict[str, dict], short: int,
                     factors: tuple[int, ...], name: str = "pi_finetune.png") -> None:
    """Left: PPL at the long context against fine-tuning steps (``curves``: scaling -> (steps, PPL)), the base
    in its own window dotted. Right: each scaling's table row (windows ``factors`` x ``short``) before (dashed)
    and after (solid) fine-tuning (``rows``: scaling -> {"before": [PPL], "after": [PPL]})."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    windows = [f * short for f in factors]
    for i, (label, (steps, ppl)) in enumerate(curves.items()):
        color = f"C{i}"
        ax.plot(steps, ppl, "o-", ms=3, color=color, label=label)
        bx.plot(windows, rows[label]["before"], "o--", color=color, alpha=0.6)
        bx.plot(windows, rows[label]["after"], "o-", color=color, label=label)
    base = rows["none"]["before"][0]
    ax.axhline(base, color="k", ls=":", label=f"base @ {short} (trained)")
    ax.set(xlabel="fine-tuning steps", ylabel=f"validation PPL @ {windows[-1]}", yscale="log",
           title=f"extending {short} -> {windows[-1]} tokens")
    ax.legend(fontsize=8)
    bx.set(xscale="log", yscale="log", xlabel="evaluation window (tokens)", ylabel="PPL of the same held-out tokens",
           title="before (dashed) and after (solid) fine-tuning")
    bx.minorticks_off()
    bx.set_xticks(windows, [str(n) for n in windows])
    bx.legend(fontsize=8)
    ctx.savefig(fig, name)
