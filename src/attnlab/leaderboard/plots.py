"""The leaderboard's figure: mean score against the compression ratio, a line per policy, a panel per regime."""
from __future__ import annotations

from attnlab.core.plotting import plt


def leaderboard_figure(ctx, board: dict, name: str = "leaderboard.png") -> str:
    regimes = [r for r in board if r != "full"]
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes), 3.4), layout="constrained",
                             sharey=True, squeeze=False)
    full = board["full"]["full"]["0"]["average"]
    for ax, regime in zip(axes[0], regimes):
        for policy, ratios in board[regime].items():
            xs = sorted(ratios, key=float)
            ax.plot([float(x) for x in xs], [ratios[x]["average"] for x in xs], "o-", label=policy)
        ax.axhline(full, color="k", ls=":", lw=1, label=f"full ({full:.2f})")
        ax.set(xlabel="compression ratio (share of the context removed)", title=regime, ylim=(-0.02, 1.02))
    axes[0][0].set_ylabel("mean score")
    axes[0][-1].legend(fontsize=7)
    return ctx.savefig(fig, name)
