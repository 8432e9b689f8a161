"""The JoMA experiments' figures: each takes measured values and a run context, and saves one PNG."""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erfinv

from attnlab.core.plotting import plt
from attnlab.theory.joma.ode import erf_invariant, linear_blowup_time
from attnlab.theory.joma.ode_checks import PUBLISHED, SQRT_PI_2


# --------------------------------------------------------------------------- joma-linear
def linear_trajectory(delta, tr, H, cap: float, min_delta: float, ctx, name: str = "joma_linear.png") -> None:
    """One Δ draw: v_l(t), both erf invariants, the attention entropy."""
    t_star = float(linear_blowup_time(delta))
    l_star = int(np.abs(delta).argmax())
    keep = np.abs(delta) >= min_delta
    live = tr.t > 0
    norm = plt.Normalize(-np.abs(delta).max(), np.abs(delta).max())
    colors = plt.get_cmap("coolwarm")(norm(delta))
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), layout="constrained")
    axes = axes.ravel()
    ax = axes[0]
    for l in range(len(delta)):
        ax.plot(tr.t, tr.v[:, l], color=colors[l], lw=2.2 if l == l_star else 0.9)
    ax.axvline(t_star, color="k", ls="--", lw=0.8, label=r"$t^*=\sqrt{\pi/2}/\max|\Delta|$")
    ax.set_ylim(-cap - 0.5, cap + 0.5)
    ax.set_xlabel("t")
    ax.set_ylabel(r"$v_l(t)$")
    ax.set_title(r"$\dot v=\Delta\circ e^{v^2/2}$: argmax$|\Delta|$ blows up")
    ax.legend(fontsize=8, loc="upper left")
    fig.colorbar(plt.cm.ScalarMappable(norm, "coolwarm"), ax=ax, label=r"$\Delta_l$", fraction=0.05)
    for ax, scale, ref, title in (
        (axes[1], 2.0, 1 / SQRT_PI_2, r"exact: $\mathrm{erf}(v_l/\sqrt{2})/\Delta_l$ (all collapse)"),
        (axes[2], 4.0, 1 / math.sqrt(math.pi), r"slides: $\mathrm{erf}(v_l/2)/\Delta_l$ on the same ODE"),
    ):
        inv = erf_invariant(tr.v[live], delta, scale)
        for l in np.flatnonzero(keep):
            ax.plot(tr.t[live], inv[:, l], color=colors[l], lw=0.9)
        ax.plot(tr.t, ref * tr.t, "k--", lw=1, label=rf"$t\cdot{ref:.3f}$")
        ax.set_xlabel("t")
        ax.set_ylabel("invariant")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    ax = axes[3]
    ax.plot(tr.t, H, color="tab:purple")
    ax.axhline(math.log(len(delta)), color="gray", ls=":", lw=1, label=rf"$\ln M$ = {math.log(len(delta)):.2f}")
    ax.axvline(t_star, color="k", ls="--", lw=0.8)
    ax.set_xlabel("t")
    ax.set_ylabel(r"entropy of softmax($v^2/2$)")
    ax.set_title("attention entropy → 0 as t → t*")
    ax.legend(fontsize=8)
    ctx.savefig(fig, name)


def linear_blowups(rows: list[dict], cap: float, ctx, name: str = "joma_linear_blowup.png") -> None:
    """All draws: detected blow-up time vs closed form; non-diverging components at the blow-up."""
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    ts = np.array([r["t_star_closed_form"] for r in rows])
    tb = np.array([r["t_blowup"] for r in rows])
    a0.plot(ts, tb, "o", ms=4)
    lim = [ts.min() * 0.95, ts.max() * 1.05]
    a0.plot(lim, lim, "k--", lw=0.8, label="y = x")
    a0.set_xlabel(r"closed form $\sqrt{\pi/2}/\max|\Delta|$")
    a0.set_ylabel(f"detected blow-up time (|v| = {cap:g})")
    a0.set_title(f"blow-up time, {len(rows)} Δ draws (max rel. err {max(r['t_blowup_rel_error'] for r in rows):.1e})")
    a0.legend()
    pred, meas = [], []
    for r in rows:
        d, v_b = np.array(r["delta"]), np.array(r["v_at_blowup"])
        others = np.arange(len(d)) != r["argmax_abs_delta"]
        pred.append(np.sqrt(2) * erfinv(d[others] / np.abs(d).max()))
        meas.append(v_b[others])
    pred, meas = np.concatenate(pred), np.concatenate(meas)
    a1.plot(pred, meas, ".", ms=4)
    lim = [pred.min() - 0.2, pred.max() + 0.2]
    a1.plot(lim, lim, "k--", lw=0.8, label="y = x")
    a1.set_xlabel(r"closed form $\sqrt{2}\,\mathrm{erfinv}(\Delta_l/|\Delta_{max}|)$")
    a1.set_ylabel(r"$v_l$ at the detected blow-up")
    a1.set_title(r"non-diverging components at $t^*$ (l ≠ argmax|Δ|)")
    a1.legend()
    ctx.savefig(fig, name)


# --------------------------------------------------------------------------- joma-nonlinear
def authors_simulation(run, mu, eta: float, tau: float, dtype: str, published: bool, ctx,
                       name: str = "joma_nonlinear_authors.png") -> None:
    """The authors' Euler run: v every 100 iterations vs μ; its entropy beside the continuous ODE
    (and the published points, if ``published``: they belong to the authors' config only)."""
    steps = len(run.H_sim)
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    cmap, norm = plt.get_cmap("rainbow", 10), plt.Normalize(0, steps)
    for i in range(0, steps, 100):
        a0.plot(run.sim.v[i].double().numpy(), color=cmap(norm(i)), lw=0.9)
    a0.plot(mu.numpy(), "k--", lw=1.5, label=r"$\mu$")
    fig.colorbar(plt.cm.ScalarMappable(norm, cmap), ax=a0, label="iteration")
    a0.set_xlabel(r"sorted index of $\mathbf{v}$ components")
    a0.set_ylabel(r"$\mathbf{v}$")
    a0.set_title(r"$\mathbf{v}$ every 100 iterations; dashed: target $\mu$")
    a0.legend(fontsize=8, loc="upper left")
    a1.plot(run.H_sim, label=f"Euler, η = {eta:g} ({dtype})")
    a1.plot(run.H_ode, "k:", lw=1.2, label="continuous ODE, t = η·step")
    if published:
        a1.plot([PUBLISHED["argmin"], steps], [PUBLISHED["min"], PUBLISHED["final"]], "rx", ms=9, mew=2,
                label="published: 0.94 @ 670, 1.55 @ 5000")
    a1.axhline(math.log(len(mu)), color="gray", ls=":", lw=1)
    a1.set_xlabel("iteration")
    a1.set_ylabel(r"entropy of softmax($v^2/\tau$)")
    a1.set_title(f"entropy: sparse, then denser (τ = {tau:g})")
    a1.legend(fontsize=8)
    ctx.savefig(fig, name)


def nonlinear_rates(check, t_end: float, ctx, name: str = "joma_nonlinear_exp.png") -> None:
    """dv/dt = (μ−v)∘exp(v²/2): draw 0's v(t), every draw's entropy, measured vs predicted rate ratios."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2), layout="constrained")
    t, v, mu = check.tr.t, check.tr.v, check.mu
    S, M = mu.shape
    t_view = min(t_end, 3.0)  # the fall and the bounce of the entropy happen by then
    ax = axes[0]
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, M))
    for l in range(M):
        ax.plot(t, v[:, 0, l], color=colors[l], lw=1)
        ax.axhline(mu[0, l], color=colors[l], ls="--", lw=0.7)
    ax.set_xlim(0, t_view)
    ax.set_xlabel("t")
    ax.set_ylabel(r"$v_l(t)$")
    ax.set_title(r"$\dot v=(\mu-v)\circ e^{v^2/2}$, draw 0 (dashed: $\mu_l$)")
    ax = axes[1]
    ax.plot(t, check.H, lw=0.8, alpha=0.7)
    ax.axhline(math.log(M), color="gray", ls=":", lw=1, label=r"$\ln M$")
    ax.set_xlim(0, t_view)
    ax.set_xlabel("t")
    ax.set_ylabel(r"entropy of softmax($v^2/2$)")
    ax.set_title(f"entropy, {S} μ draws: falls, then rises")
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.loglog(check.ratio_pred.ravel(), check.ratio_meas.ravel(), ".", ms=3, alpha=0.6)
    lim = [1.0, check.ratio_pred.max() * 1.5]
    ax.loglog(lim, lim, "k--", lw=0.8, label="y = x")
    ax.set_xlabel(r"predicted $e^{(\mu_k^2-\mu_j^2)/2}$")
    ax.set_ylabel(r"measured rate$_k$/rate$_j$")
    ax.set_title("Theorem 4: convergence-rate ratios, all pairs")
    ax.legend(fontsize=8)
    ctx.savefig(fig, name)


# --------------------------------------------------------------------------- joma-invariants
def invariants(runs: dict, corr: dict, num_distinct: int, num_contextual: int, small_lr: float,
               max_rel_error: float, corr_steps, corr_min, ctx, name: str = "invariants.png") -> None:
    """z vs ẑ for exp and linear attention; the relative error over time; softmax Pearson(ẑ, z)."""
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8), layout="constrained")
    colors = plt.get_cmap("tab10").colors
    for ax, kind in zip(axes[:2], ("exp", "linear")):
        h, zh, _ = runs[kind]
        steps = np.asarray(h.steps)
        for i, l in enumerate((0, 3, 6, num_distinct, num_contextual - 1)[:5]):
            if l >= num_contextual:
                continue
            ax.plot(steps, h.z[:, 0, l], color=colors[i], lw=2, label=f"token {l}")
            ax.plot(steps, zh[:, 0, l], color="k", ls="--", lw=0.8)
        ax.set_title(f"{kind} attention: z (colour) vs ẑ from V (dashed)")
        ax.set_xlabel("step")
        ax.set_ylabel(r"$z_l$")
        ax.legend(fontsize=7)
    ax = axes[2]
    for case, (h, zh, _) in runs.items():
        err = (h.z - zh).norm(dim=-1) / (h.z - h.z[0]).norm(dim=-1).amax(0)  # (T, S)
        ax.semilogy(np.asarray(h.steps) * (2 if "x2" in case else 1), err.median(1).values.clamp_min(1e-16), label=case)
    ax.axhline(max_rel_error, color="k", ls=":", lw=0.8)
    ax.set_ylim(bottom=1e-7)
    ax.set_xlabel(f"time (steps of {small_lr:g})")
    ax.set_title(r"$\|z-\hat z\|$ / max$\|z-z(0)\|$ (median over seeds)")
    ax.legend(fontsize=7)
    ax = axes[3]
    for kind, color in (("gaussian", "tab:red"), ("random", "tab:blue")):
        steps, c = corr[kind]
        ax.plot(steps, c.median(1).values, color=color, label=f"{kind} P (median)")
        ax.fill_between(steps, c.amin(1), c.amax(1), color=color, alpha=0.2)
    for s, thr in zip(corr_steps, corr_min):
        ax.plot([s], [thr], "k_", ms=14)
    ax.set_xlabel("step")
    ax.set_title(r"softmax: Pearson($\hat z$, z), authors' setup")
    ax.legend(fontsize=7)
    ctx.savefig(fig, name)


# --------------------------------------------------------------------------- joma-cooccurrence / joma-hierarchy
def cooccurrence(trees: dict, fits: dict, ctx, name: str = "cooccurrence.png") -> None:
    """Measured P[l|m] vs 1 − H/L, one panel per keep-probability preset."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4), sharey=True, layout="constrained")
    rng = np.random.default_rng(0)
    for ax, preset in zip(axes, ("exact", "constant")):
        tree, f = trees[preset], fits[preset]
        x, y, H = f["_scatter"]
        ax.scatter(x + rng.uniform(-0.012, 0.012, x.shape), y, s=6, alpha=0.35, c=H, cmap="viridis")
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="y = x (1 − H/L)")
        if preset == "constant":
            hh = np.arange(1, tree.L)
            ax.plot(1 - hh / tree.L, (1 - 1 / tree.L) ** hh, "r-o", ms=4, lw=1, label=r"$(1-1/L)^H$")
        ax.set_title(f"{preset}: r = {f['pearson']:.4f}, slope = {f['slope']:.3f}")
        ax.set_xlabel(r"predicted $1 - H(l,m)/L$ (jittered; colour = H)")
        ax.legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel(r"measured $P[l=1 \mid m=1]$")
    ctx.savefig(fig, name)


def hierarchy_scores(levels, n_layers: int, classes: int, evals: dict, marks, train_loss, bayes_bracket, ctx,
                     name: str = "hierarchy_scores.png") -> None:
    """Alignment score vs step per latent level (one curve per layer, with both controls); loss and accuracy."""
    n = len(levels) + 1
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    steps = np.array(marks)
    for j, (ax, lvl) in enumerate(zip(axes, levels)):
        for i in range(n_layers):
            c = colors[i % len(colors)]
            ax.plot(steps, [evals[s]["score"][i][j] for s in marks], "-o", ms=3, color=c, label=f"layer {i + 1}")
            ax.plot(steps, [evals[s]["same_class_resample"][i][j] for s in marks], ":", color=c, lw=1)
            ax.plot(steps, [evals[s]["shuffled"][i][j] for s in marks], "-", color="0.6", lw=0.8)
        ax.set_title(lvl)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("alignment score")
    axes[0].legend(fontsize=8, loc="lower right")
    ax = axes[-1]
    k = max(1, len(train_loss) // 50)
    smooth = np.convolve(train_loss, np.ones(k) / k, mode="valid")
    ax.plot(np.arange(len(smooth)) + k, smooth, color="tab:red", lw=1, label="train loss (smoothed)")
    ax.plot(steps, [evals[s]["loss"] for s in marks], "o", ms=3, color="tab:red", label="held-out loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy", color="tab:red")
    ax2 = ax.twinx()
    ax2.plot(steps, [evals[s]["acc"] for s in marks], "-o", ms=3, color="tab:blue", label="held-out accuracy")
    ax2.axhspan(*bayes_bracket, color="tab:blue", alpha=0.15, label="Bayes (bracket)")
    ax2.axhline(1 / classes, color="0.5", ls=":", lw=0.8, label="chance")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("accuracy", color="tab:blue")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    # the legend below the axes: the curves fill them
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    ax.set_title("loss / accuracy")
    ctx.savefig(fig, name)


# --------------------------------------------------------------------------- joma-invariants-coupling
def coupling(runs: dict, ctx, name: str = "coupling.png") -> None:
    """Per run: the invariant's error against the measured coupling κ; and Pearson before/after adding C."""
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    for (kind, r), colour in zip(runs.items(), ("C0", "C3")):
        a0.scatter(r["coupling"], r["error"], color=colour, label=f"{kind} P", s=18)
        a1.scatter(r["pearson"], r["with_coupling"], color=colour, label=f"{kind} P", s=18)
    a0.set(xscale="log", yscale="log", xlabel="coupling κ = ‖C‖ / ‖z − z(0)‖ (centred)",
           ylabel="1 − Pearson(ẑ, z), last step", title="the invariant's error vs the coupling it drops")
    a1.axline((0.9, 0.9), slope=1, color="grey", lw=0.8)
    a1.set(xlabel="Pearson(ẑ, z): the authors' estimate", ylabel="Pearson(ẑ + C, z)",
           title="adding the measured coupling")
    for a in (a0, a1):
        a.legend(fontsize=8)
    ctx.savefig(fig, name)


# --------------------------------------------------------------------------- joma-hierarchy-controls
def hierarchy_controls(levels, marks, curves, base, shuffled, t_half, ctx, name: str = "hierarchy_controls.png"):
    """One panel per level: each seed's best-layer score along training, the random-feature band, the shuffled
    latents' score; last panel: each level's half-gain step per seed."""
    fig, axes = plt.subplots(1, len(levels) + 1, figsize=(4.2 * (len(levels) + 1), 3.6), layout="constrained")
    x = [max(m, marks[1] / 2) for m in marks]  # step 0 half a log-step before the first evaluation
    for j, (lvl, ax) in enumerate(zip(levels, axes)):
        mu, sd = base[:, j].mean(), base[:, j].std(ddof=1)
        ax.axhspan(mu - 2 * sd, mu + 2 * sd, color="grey", alpha=0.25, label="untrained (±2 SD)")
        for k, c in enumerate(curves):
            ax.plot(x, c[:, j], color=f"C{k}", lw=1.2, label=f"seed {k}")
        ax.axhline(shuffled[:, j].max(), color="black", ls=":", lw=0.8, label="shuffled latents")
        ax.set(xscale="log", xlabel="step (first point: init)", ylabel="best-layer alignment score", title=lvl)
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    for j, lvl in enumerate(levels):
        ax.scatter(np.full(len(t_half), j), t_half[:, j], color=[f"C{k}" for k in range(len(t_half))])
    ax.set(xticks=range(len(levels)), xticklabels=[lvl.split(" (")[0] for lvl in levels], yscale="log",
           ylabel="step at half the gain", title="which level first (per seed)")
    ctx.savefig(fig, name)
