"""Figures of the KV-cache runs: NLL, memory and speed along a stream; PPL as a budget's split moves."""
from __future__ import annotations

import numpy as np

from attnlab.core.plotting import plt


def _smooth(x: np.ndarray, w: int = 64) -> np.ndarray:
    return np.convolve(x, np.ones(w) / w, mode="valid") if len(x) > w else x


def stream_figure(ctx, runs: dict, long: dict, context: int, name: str, control: dict | None = None) -> None:
    """NLL per position, KV bytes and tokens/s along the stream, one line per run (and, with
    ``long``, the stream past the model's context; with ``control``, the sliding window with
    re-computation against sinks on the same sampled tokens of each stretch)."""
    fig, axes = plt.subplots(1, 4 if long else 3, figsize=(17 if long else 13, 3.4), layout="constrained")
    for k, r in runs.items():
        axes[0].plot(_smooth(r.nll), label=f"{k} (PPL {r.ppl:.2f})", lw=1)
        if r.kv_bytes:
            axes[1].plot([t for t, _ in r.kv_bytes], [v / 2**20 for _, v in r.kv_bytes], label=k)
        if r.clock:
            axes[2].plot(*r.throughput(), label=k, lw=1)
    axes[0].set(xlabel="position", ylabel="NLL (64-token mean)", title="streaming NLL")
    axes[1].set(xlabel="tokens seen", ylabel="KV cache (MiB)", title="memory")
    axes[2].set(xlabel="tokens seen", ylabel="tokens/s", title="speed (dense: chunked)", yscale="log")
    for ax in axes[:3]:
        ax.legend(fontsize=7)
    if long:
        for k, r in long.items():
            axes[3].plot(_smooth(r.nll, 256), label=k, lw=1)
        for i, c in enumerate((control or {}).values()):
            x = np.mean(c["positions"])
            axes[3].plot(x, np.log(c["recompute_ppl"]), "kx", ms=8, label=None if i else "re-computation (sampled)")
            axes[3].plot(x, np.log(c["sinks_ppl"]), "o", mfc="none", color="C1",
                         label=None if i else "sinks, same sampled tokens")
        axes[3].axvline(context, color="k", ls=":", lw=1)
        axes[3].set(xlabel="position", ylabel="NLL (256-token mean)", title=f"past the {context}-token context")
        axes[3].legend(fontsize=7)
    ctx.savefig(fig, name)


def split_figure(ctx, split: dict, budget: int, n_sink: int, sinks: float, dense: float,
                 name: str = "h2o_split.png") -> None:
    """sinks+h2o PPL against the heavy hitters kept, at one budget (``split``: recent window -> PPL)."""
    fig, ax = plt.subplots(figsize=(5, 3.4), layout="constrained")
    heavy = [budget - n_sink - r for r in split]
    ax.plot(heavy, list(split.values()), "o-", label=f"sinks({n_sink})+h2o")
    ax.axhline(sinks, color="C1", ls="--", label=f"sinks({n_sink})+window (0 heavy)")
    ax.axhline(dense, color="k", ls=":", label="dense")
    ax.set(xlabel=f"heavy hitters kept (of a budget of {budget})", ylabel="PPL", title="splitting a KV budget")
    ax.legend(fontsize=7)
    ctx.savefig(fig, name)
