"""Figures of the accuracy runs: one method's accuracy per task, and the table's accuracy against budget."""
from __future__ import annotations

from attnlab.core.plotting import plt


def task_bars(ctx, result: dict, name: str = "accuracy.png") -> str:
    """Accuracy per task with its standard error, chance dashed."""
    tasks = list(result["tasks"])
    rows = [result["tasks"][t] for t in tasks]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(tasks), 3.4), layout="constrained")
    ax.bar(tasks, [r["acc"] for r in rows], yerr=[r.get("acc_stderr") or 0 for r in rows], color="C0", capsize=3)
    for i, r in enumerate(rows):
        if r.get("chance") is not None:
            ax.hlines(r["chance"], i - 0.4, i + 0.4, colors="k", linestyles="--", lw=1)
    ax.set(ylim=(0, 1), ylabel="accuracy", title=f"{result['method']}, {result['shots']}-shot (dashed: chance)")
    ax.tick_params(axis="x", labelrotation=30)
    return ctx.savefig(fig, name)


def budget_figure(ctx, dense: float, curves: dict[str, dict[float, float]], static: dict[str, float],
                  name: str = "accuracy_vs_budget.png") -> str:
    """Average accuracy against the KV budget (share of the context kept), one line per policy; the
    sparsity rules at their keep as points; dense as a line."""
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    for policy, curve in curves.items():
        budgets = sorted(curve)
        ax.plot(budgets, [curve[b] for b in budgets], "o-", label=policy)
    for i, (rule, acc) in enumerate(static.items()):
        ax.plot([1.0], [acc], marker="sxD^v"[i % 5], ls="none", label=rule)
    ax.axhline(dense, color="k", ls=":", lw=1, label=f"dense ({dense:.3f})")
    ax.set(xlabel="KV budget (share of the context kept); points at 1: MLP sparsity rules",
           ylabel="average accuracy", title="accuracy vs budget")
    ax.legend(fontsize=7)
    return ctx.savefig(fig, name)
