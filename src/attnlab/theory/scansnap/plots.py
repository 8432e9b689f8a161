"""The Scan&Snap experiments' figures: each takes measured values and a run context, and saves one PNG."""
from __future__ import annotations

import numpy as np
import torch

from attnlab.core.plotting import plt
from attnlab.theory.scansnap.population import attention_c


def fig4(fates, steps, final_step: int, n_common: int, ctx, name: str = "fig4.png") -> None:
    """c_{l|n} over training (commons | distinct tokens) and the final z_ml."""
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.3, 1]}, layout="constrained")
    im = a0.imshow(fates.c_rows.numpy(), aspect="auto", cmap="viridis")
    a0.axvline(n_common - 0.5, color="w", ls="--", lw=1)
    a0.set_yticks(range(len(steps)), [f"iter {s}" if s != final_step else f"final ({s})" for s in steps])
    a0.set_xlabel("token # (commons | distinct tokens of class 1)")
    a0.set_title(r"$c_{l|n}$ over training")
    fig.colorbar(im, ax=a0, fraction=0.04)
    n_distinct = len(fates.shown) - n_common
    a1.bar(range(len(fates.shown)), fates.z_shown.numpy(), color=["tab:red"] * n_common + ["tab:green"] * n_distinct)
    a1.axhline(0, color="k", lw=0.5)
    a1.set_xlabel("token #")
    a1.set_title(r"final $z_{ml}$: commons (red) < 0 < distinct (green)")
    ctx.savefig(fig, name)


def fig6(num_last, eta_z, ratio, num_next_per_last: int, mean: dict, std: dict, prior: dict, ctx,
         name: str = "fig6.png") -> None:
    """Entropy vs η_Y/η_Z, one panel per num_last, one curve per η_Z (mean ± std), the prior dotted."""
    fig, axes = plt.subplots(1, len(num_last), figsize=(3.2 * len(num_last), 3.2), squeeze=False)
    for ax, nl in zip(axes[0], num_last):
        for i, ez in enumerate(eta_z):
            ax.errorbar(ratio, mean[nl][i], std[nl][i], marker="o", ms=3, capsize=2, label=rf"$\eta_Z={ez:g}$")
        ax.axhline(prior[nl], color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(ratio, [f"{r:g}" for r in ratio])
        ax.set_title(f"#last/next tokens = {nl}/{nl * num_next_per_last}")
        ax.set_xlabel(r"$\eta_Y/\eta_Z$")
    axes[0][0].set_ylabel(r"average entropy of $c_n$ (distinct tokens)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    ctx.savefig(fig, name)


def theorem2_signs(dist, t, dZ, ratio: float, ctx, name: str = "theorem2_signs.png") -> None:
    """dz_ml/dt over time: distinct tokens (green) above 0, common tokens (red) below."""
    live = t > 0
    m = dist.query[0]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for l in dist.distinct[0]:
        ax.plot(t[live], dZ[live][:, m, l].numpy(), color="tab:green", lw=0.8)
    for l in dist.common:
        ax.plot(t[live], dZ[live][:, m, l].numpy(), color="tab:red", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("t")
    ax.set_ylabel(r"$dz_{ml}/dt$")
    ax.set_title(rf"Theorem 2, $\eta_Y/\eta_Z={ratio:g}$: distinct > 0 > common")
    ctx.savefig(fig, name)


def theorem3_gain(dist, t, sol, gain, ctx, name: str = "theorem3_gain.png") -> None:
    """Relative gain r(t) against r(0)χ(t) for three tokens; χ_l0 between its B_n bounds."""
    live = t > 0
    m = dist.query[0]
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 3.6))
    D = dist.distinct[0]
    c = attention_c(dist, sol.Z)[:, 0, D]
    z = sol.Z[:, m, D]
    l0 = int(torch.argmax(dist.P[0, D]))
    chi = torch.exp(2 * (z[:, l0] - z[0, l0]))
    for lp in (0, 4, 8):
        r = c[:, l0] ** 2 / c[:, lp] ** 2 - 1
        a0.plot(t[live], r[live].numpy(), label=f"r(l0/l{lp + 1})")
        a0.plot(t[live], (r[0] * chi)[live].numpy(), "k:", lw=1)
    a0.set_xscale("log")
    a0.set_yscale("log")
    a0.set_title("relative gain r(t) (dotted: closed form r(0)χ)")
    a0.legend(fontsize=8)
    a1.plot(t[live], gain.chi_l0[live], label=r"$\chi_{l_0}$")
    a1.plot(t[live], np.exp(2 * gain.f2_l0_init * gain.B)[live], "g--", label=r"$e^{2f^2(0)B_n}$")
    a1.plot(t[live], np.exp(2 * gain.B)[live], "r--", label=r"$e^{2B_n}$")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.legend(fontsize=8)
    a1.set_title("Theorem 3 bounds")
    ctx.savefig(fig, name)


def theorem4_snap(t, flows: dict, ctx, name: str = "theorem4_snap.png") -> None:
    """B_n(t) per η_Y/η_Z with its fit, t0 (dashed) and the peak of dB_n/dt (orange)."""
    live = t > 0
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for r, f in flows.items():
        ax.plot(t[live], f.gain.B[live], label=rf"$B_n$, $\eta_Y/\eta_Z={r:g}$")
        ax.plot(f.snap["fit_t"], f.snap["fit_curve"], "k:", lw=1)
        ax.axvline(f.snap["t0"], color="gray", ls="--", lw=0.7)
        ax.axvline(f.snap["t_peak"], color="tab:orange", ls="-", lw=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_title(r"Theorem 4: $B_n(t)$; dotted fit, dashed $t_0$, orange peak of $dB_n/dt$")
    ax.legend(fontsize=8)
    ctx.savefig(fig, name)


def ode_vs_sgd(sgd: dict, batch_size: int, dt: float, ctx, name: str = "ode_vs_sgd.png") -> None:
    """Relative error of Z between SGD and the population ODE over time, one curve per T."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for T, curve in sgd["curve"].items():
        ax.plot(sgd["t"], curve, marker=".", label=f"T = {T}")
    ax.set_yscale("log")
    ax.set_xlabel("t (= step · dt)")
    ax.set_ylabel(r"$\|Z_{SGD}-Z_{ODE}\|/\|Z_{ODE}-Z_0\|$")
    ax.set_title(f"ODE vs SGD (batch {batch_size}, dt {dt:g})")
    ax.legend()
    ctx.savefig(fig, name)


def theorem4_sweep(cells: dict, cfg, ctx, name: str = "theorem4_sweep.png") -> None:
    """Left: R² of the predicted-constant fit vs horizon, per (M, ratio); right: a_eff(t)/a_pred along t."""
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    styles = {r: s for r, s in zip(cfg.ratios, ("-", "--", ":", "-."))}
    colours = {nl: f"C{i}" for i, nl in enumerate(cfg.num_last)}
    for (nl, r), c in cells.items():
        label = f"M={c['M']}, η_Y/η_Z={r:g}"
        a0.plot(cfg.horizons, c["r2"], styles[r], color=colours[nl], marker="o", label=label)
        a1.plot(c["t"], c["a_local_curve"], styles[r], color=colours[nl], label=label)
    a0.axhline(cfg.r2_min, color="grey", lw=0.8)
    a0.set(xscale="log", xlabel="horizon of the fit (t)", ylabel="R² (predicted constant)",
           ylim=(max(-1.0, a0.get_ylim()[0]), 1.02), title="fit of ln(C0 + 2Kη_Z/η_Y ln²(Mη_Y t/K))")
    a1.axhspan(1 / cfg.factor, cfg.factor, color="green", alpha=0.1)
    a1.axhline(1.0, color="grey", lw=0.8)
    a1.set(xscale="log", yscale="log", xlabel="t", ylabel="a_eff(t) / (2Kη_Z/η_Y)",
           title="the local constant e^{B_n}/ln²(Mη_Y t/K)")
    a1.legend(fontsize=7, ncol=2)
    ctx.savefig(fig, name)
