"""Figures of the contextual-sparsity runs: perplexity against the share kept (MLP neurons per rule,
attention heads), the per-layer picture (share kept, |h| mass captured, cross-layer cosine,
consecutive-token overlap), the ReLU control's and Deja Vu's predictors'."""
from __future__ import annotations

from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from attnlab.core.plotting import plt


def _plain_log_y(ax) -> None:
    """Perplexities as plain numbers on a log axis (not 4 x 10^1)."""
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def ppl_figure(ctx, curves: dict[str, dict[float, float]], heads: dict[float, float], dense: float,
               name: str = "sparsity_ppl.png") -> str:
    """Left: PPL against the share of MLP neurons kept, one line per rule; right: against heads kept.
    ``curves``: rule -> {keep: PPL}; ``heads``: {keep: PPL} (may be empty)."""
    fig, axes = plt.subplots(1, 2 if heads else 1, figsize=(10 if heads else 5.2, 3.6), layout="constrained",
                             squeeze=False)
    ax = axes[0, 0]
    for rule, curve in curves.items():
        keeps = sorted(curve)
        ax.plot(keeps, [curve[k] for k in keeps], "o-", label=rule, ms=4)
    ax.axhline(dense, color="k", ls=":", lw=1, label=f"dense ({dense:.2f})")
    ax.axhline(dense * 1.02, color="grey", ls="--", lw=0.8, label="dense + 2%")
    ax.set(xlabel="share of MLP neurons kept per token", ylabel="perplexity", yscale="log",
           title="MLP sparsity: contextual vs static")
    _plain_log_y(ax)
    ax.invert_xaxis()  # sparser to the right
    ax.legend(fontsize=7)
    if heads:
        ax = axes[0, 1]
        keeps = sorted(heads)
        ax.plot(keeps, [heads[k] for k in keeps], "o-", color="C4", label="top heads by output norm", ms=4)
        ax.axhline(dense, color="k", ls=":", lw=1, label="dense")
        ax.axhline(dense * 1.02, color="grey", ls="--", lw=0.8, label="dense + 2%")
        ax.set(xlabel="share of attention heads kept per token", ylabel="perplexity", yscale="log",
               title="head sparsity")
        _plain_log_y(ax)
        ax.invert_xaxis()
        ax.legend(fontsize=7)
    return ctx.savefig(fig, name)


def layer_figure(ctx, profiles: dict[str, dict[str, list[float]]], keep: float, cosine: list[float],
                 overlap: list[float] | None = None, name: str = "sparsity_layers.png") -> str:
    """Per layer: the share of neurons each rule kept and the share of |h| mass it captured at ``keep``
    (``profiles``: rule -> {"kept": [...], "mass": [...]}), the cosine of the residual stream across the
    layer and, given ``overlap``, the share of a token's oracle set reused by the next token."""
    n = 3 if overlap is not None else 2
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 3.6), layout="constrained")
    for k, (rule, p) in enumerate(profiles.items()):
        layers = range(len(p["mass"]))
        axes[0].plot(layers, p["mass"], "o-", color=f"C{k}", ms=3, label=f"{rule}: |h| mass kept")
        axes[0].plot(layers, p["kept"], ":", color=f"C{k}", lw=1, label=f"{rule}: neurons kept")
    axes[0].set(xlabel="layer", ylabel="share", ylim=(0, 1.02), title=f"per-layer profile at keep {keep:g}")
    axes[0].legend(fontsize=6)
    axes[1].plot(range(len(cosine)), cosine, "o-", ms=3, color="C5")
    axes[1].axhline(0.9, color="grey", ls="--", lw=0.8, label="0.9 (Deja Vu)")
    axes[1].set(xlabel="layer i", ylabel="mean cos(resid_pre_i, resid_post_i)",
                title="slowly changing embeddings")
    axes[1].legend(fontsize=7)
    if overlap is not None:
        axes[2].plot(range(len(overlap)), overlap, "o-", ms=3, color="C6", label="oracle set, token t vs t+1")
        axes[2].axhline(keep, color="grey", ls="--", lw=0.8, label=f"chance ({keep:g})")
        axes[2].set(xlabel="layer", ylabel="share of the set reused", ylim=(0, 1.02),
                    title="consecutive-token overlap")
        axes[2].legend(fontsize=7)
    return ctx.savefig(fig, name)


def relu_figure(ctx, models: dict[str, dict], keep: float, zero_line: float, name: str = "relu_control.png") -> str:
    """Left: per layer, the share of the entries of h exactly zero in each dense model; right: oracle PPL
    increase over dense (%) against the share of neurons kept. ``models``: activation -> the relu-control
    experiment's metrics of that model (zero_per_layer, dense_ppl, ppl {keep: PPL})."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    for k, (act, m) in enumerate(models.items()):
        a.plot(range(len(m["zero_per_layer"])), m["zero_per_layer"], "o-", color=f"C{k}", ms=4,
               label=f"{act} (all layers {m['zero']:.1%})")
        curve = {1.0: m["dense_ppl"], **{float(kk): p for kk, p in m["ppl"].items()}}
        keeps = sorted(curve)
        b.plot(keeps, [100 * (curve[kk] / m["dense_ppl"] - 1) for kk in keeps], "o-", color=f"C{k}", ms=4,
               label=f"{act} (dense PPL {m['dense_ppl']:.2f})")
    a.axhline(zero_line, color="grey", ls="--", lw=0.8, label=f"{zero_line:.0%} (Deja Vu, ReLU OPT)")
    a.set(xlabel="layer", ylabel="share of h exactly 0", ylim=(-0.02, 1.02), title="natural sparsity (dense)",
          xticks=range(len(m["zero_per_layer"])))
    a.legend(fontsize=7)
    b.axhline(0.0, color="k", ls=":", lw=1)
    b.axvline(keep, color="grey", ls="--", lw=0.8, label=f"keep {keep:g} (claims)")
    b.set(xlabel="share of MLP neurons kept per token (oracle top-k of |h|)", ylabel="PPL increase over dense (%)",
          title="oracle sparsity")
    b.invert_xaxis()  # sparser to the right
    b.legend(fontsize=7)
    return ctx.savefig(fig, name)


def dejavu_figure(ctx, s: dict, ppl: dict[str, float], keep: float) -> str:
    """dejavu: per layer the predicted sets' recall and |h| mass per source (``s``: source -> scores, left);
    PPL per run (right)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained", width_ratios=(2.2, 1))
    for src, style, color in zip(s, ("o", "s"), ("C0", "C1")):
        a.plot(s[src]["layers"], s[src]["recall"], style + "-", color=color, ms=3,
               label=f"{src}: recall at oracle size")
        a.plot(s[src]["layers"], s[src]["mass"], style + ":", color=color, ms=2, label=f"{src}: |h| mass captured")
    a.plot(s["own"]["layers"], s["own"]["oracle_mass"], "--", color="grey", lw=0.8, label="oracle: |h| mass")
    a.axhline(keep, color="grey", lw=0.8, ls="-.", label=f"chance recall ({keep:g})")
    a.set(xlabel="layer", ylabel="share", ylim=(0, 1.02), title=f"predicting the top {keep:.0%} of neurons")
    a.legend(fontsize=7)
    names = list(ppl)
    b.bar(names, [ppl[n] for n in names], color=["k", "grey", "C0", "C1"])
    b.set(ylabel="perplexity", title=f"PPL at keep {keep:g}")
    b.set_ylim(min(ppl.values()) * 0.95, max(ppl.values()) * 1.03)
    return ctx.savefig(fig, "dejavu.png")


def curve_figure(ctx, rows: list[dict], keep: float, zeros: list[float] | None = None,
                 name: str = "dejavu_relu.png") -> str:
    """(Left, with ``zeros``: the exact-zero share per layer.) Recall (solid) and |h| mass (dotted) of the
    predicted sets against training tokens, one colour per rank; chance (``keep``) dashed."""
    panels = 2 if zeros is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.8), layout="constrained", squeeze=False)
    if zeros is not None:
        axes[0, 0].bar(range(len(zeros)), [100 * z for z in zeros], color="tab:green")
        axes[0, 0].set(xlabel="layer", ylabel="h exactly zero (%)", ylim=(0, 100), title="natural sparsity")
    ax = axes[0, -1]
    for i, rank in enumerate(sorted({r["rank"] for r in rows})):
        pts = [r for r in rows if r["rank"] == rank]
        ax.plot([r["tokens"] for r in pts], [r["recall"] for r in pts], marker="o", c=f"C{i}", label=f"rank {rank}")
        ax.plot([r["tokens"] for r in pts], [r["mass"] for r in pts], marker=".", ls=":", c=f"C{i}")
    ax.axhline(keep, ls="--", c="grey", lw=1)
    ax.set_xscale("log")
    ax.set(xlabel="predictor training tokens", ylabel="recall (solid), |h| mass (dotted)", ylim=(0, 1.02),
           title=f"predictors at keep {keep:.0%}")
    ax.legend(fontsize=8)
    return ctx.savefig(fig, name)
