"""Registered Scan&Snap experiments: ``scansnap-fig4``, ``scansnap-fig6``, ``scansnap-theorems``."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.core.plotting import plt
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.population import attention_c, distinct_entropy, integrate_flow
from attnlab.theory.scansnap.theorems import (
    theorem2_signs,
    theorem3_relative_gain,
    theorem4_scan_snap,
    z_rates,
)
from attnlab.theory.scansnap.train import SGDConfig, lr_grid, train_sweep


def _positive(name: str, values) -> None:
    values_1d = np.atleast_1d(values)
    if values_1d.size == 0:
        raise ConfigError(f"{name} is empty: give at least one value, e.g. --set {name}=1")
    if any(not np.isfinite(v) or v <= 0 for v in values_1d):  # NaN <= 0 is False: test finiteness too
        raise ConfigError(f"{name} must be positive and finite (got {values}): a learning rate or ratio cannot be <= 0")


# --------------------------------------------------------------------------- fig 4
@dataclass(frozen=True)
class Fig4Config:
    data: SeqClassConfig = SeqClassConfig(num_last=2, num_next_per_last=1)
    sgd: SGDConfig = SGDConfig(init="zero")
    eta_z: float = 1.0
    ratio: float = 1.0  # η_Y / η_Z
    seed: int = 2  # the authors' figure_4.log
    show_steps: tuple[int, ...] = (0, 2, 4, 6, 8, 10)  # rows of the figure, then the final step

    def __post_init__(self):
        _positive("eta_z", self.eta_z)
        _positive("ratio", self.ratio)


@register(
    "scansnap-fig4",
    "Fig. 4: c_{l|n} of one class over training — common tokens suppressed, distinct tokens win (K=2, zero init).",
    Fig4Config,
)
def run_fig4(cfg: Fig4Config, ctx) -> Result:
    dist = SeqClassDistribution(cfg.data)
    steps = sorted({s for s in cfg.show_steps if s <= cfg.sgd.steps} | {cfg.sgd.steps})
    with ctx.progress(cfg.sgd.steps, "scansnap-fig4") as bar:
        res = train_sweep(dist, torch.tensor([cfg.eta_z]), torch.tensor([cfg.eta_z * cfg.ratio]), [cfg.seed],
                          cfg.sgd, ctx.device, snapshot_steps=steps, on_step=lambda _: bar.update())
    n = 0
    m, D, Cm = dist.query[n], dist.distinct[n], dist.common
    shown = torch.cat([Cm, D])  # commons then class-0 distincts, as in the paper
    c_rows = torch.stack([attention_c(dist, res.snapshots[s][1][0, 0].double())[n, shown] for s in steps])
    Z = res.Z[0, 0]
    z_common, z_distinct = Z[m, Cm], Z[m, D]
    from scipy.stats import spearmanr

    rho = spearmanr(dist.P[n, D].numpy(), z_distinct.numpy()).statistic
    c_final = attention_c(dist, Z.double())[n]
    claims = [
        check("Theorem 2: every common token is suppressed (fraction with z_ml < 0 at the end)",
              (z_common < 0).float().mean(), 1.0, 0.0, "at_least"),
        check("Theorem 2: every distinct token grows (fraction with z_ml > 0 at the end)",
              (z_distinct > 0).float().mean(), 1.0, 0.0, "at_least"),
        check("distinct tokens win: attention mass on distinct tokens exceeds mass on commons",
              float(c_final[D].sum() - c_final[Cm].sum()), 0.0, 0.0, "at_least"),
        check("z_ml grows faster with larger P(l|m,n) (Spearman rank correlation over distinct tokens)",
              rho, 1.0, 0.1, "at_least"),
    ]
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.3, 1]}, layout="constrained")
    im = a0.imshow(c_rows.numpy(), aspect="auto", cmap="viridis")
    a0.axvline(len(Cm) - 0.5, color="w", ls="--", lw=1)
    a0.set_yticks(range(len(steps)), [f"iter {s}" if s != cfg.sgd.steps else f"final ({s})" for s in steps])
    a0.set_xlabel("token # (commons | distinct tokens of class 1)")
    a0.set_title(r"$c_{l|n}$ over training")
    fig.colorbar(im, ax=a0, fraction=0.04)
    a1.bar(range(len(shown)), Z[m, shown].numpy(), color=["tab:red"] * len(Cm) + ["tab:green"] * len(D))
    a1.axhline(0, color="k", lw=0.5)
    a1.set_xlabel("token #")
    a1.set_title(r"final $z_{ml}$: commons (red) < 0 < distinct (green)")
    ctx.savefig(fig, "fig4.png")
    neg = [(int(l), float(z), float((cfg.data.T - 1) * dist.P[n, l])) for l, z in zip(D, z_distinct) if z <= 0]
    summary = "All distinct tokens end with z_ml > 0." if not neg else (
        "Distinct tokens ending with z_ml <= 0 (token, z, expected count per sequence): "
        + ", ".join(f"({l}, {z:.3f}, {c:.2f})" for l, z, c in neg)
        + ". Theorem 2 is a T → ∞ statement (it holds on the population flow, see scansnap-theorems); "
        "at finite T the rarest tokens appear about once per sequence. Raise data.T to check.")
    return Result(
        claims,
        summary=summary,
        metrics={"steps_shown": steps, "c_rows": c_rows.tolist(), "final_loss": float(res.loss[-1].mean())},
        figures={"fig4.png": "Fig. 4: attention c_{l|n} of class 1 at iterations 0-10 and final; final logits z."},
    )


# --------------------------------------------------------------------------- fig 6
@dataclass(frozen=True)
class Fig6Config:
    num_last: tuple[int, ...] = (1, 3, 5, 10)
    eta_z: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
    ratio: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)  # η_Y / η_Z
    seeds: int = 10  # seeds 1..seeds
    data: SeqClassConfig = SeqClassConfig()  # data.num_last is ignored: the num_last tuple is swept
    sgd: SGDConfig = SGDConfig()

    def __post_init__(self):
        _positive("eta_z", self.eta_z)
        _positive("ratio", self.ratio)
        if not self.num_last or min(self.num_last) < 1:
            raise ConfigError("num_last values must be >= 1 (zero classes otherwise)")
        if self.seeds < 1:
            raise ConfigError("seeds must be >= 1")


PRIOR_ENTROPY_NOTE = "entropy of the distinct-token prior alone (z = 0)"


def _fraction(flags) -> float:
    flags = list(flags)
    return float(np.mean(flags)) if flags else float("nan")


@register(
    "scansnap-fig6",
    "Fig. 6: entropy of attention on distinct tokens vs η_Y/η_Z, 4x4x4 configs x 10 seeds (batched sweep).",
    Fig6Config,
)
def run_fig6(cfg: Fig6Config, ctx) -> Result:
    seeds = list(range(1, cfg.seeds + 1))
    eta_z, eta_y = lr_grid(cfg.eta_z, cfg.ratio)  # (C,) each, η_Z-major
    table = {}  # num_last -> (n_eta_z, n_ratio, seeds) entropies
    prior = {}
    with ctx.progress(len(cfg.num_last) * cfg.sgd.steps, "scansnap-fig6 sweep") as bar:
        for nl in cfg.num_last:
            dist = SeqClassDistribution(replace(cfg.data, num_last=nl))
            res = train_sweep(dist, eta_z, eta_y, seeds, cfg.sgd, ctx.device, on_step=lambda _: bar.update())
            table[nl] = distinct_entropy(dist, res.Z.double()).mean(-1).view(len(cfg.eta_z), len(cfg.ratio), -1)
            prior[nl] = float(distinct_entropy(dist, torch.zeros(dist.M, dist.M, dtype=torch.float64)).mean())
    mean = {nl: e.mean(-1).numpy() for nl, e in table.items()}  # (n_eta_z, n_ratio)
    std = {nl: (e.std(-1, correction=1) if cfg.seeds > 1 else torch.zeros_like(e[..., 0])).numpy()
           for nl, e in table.items()}
    rows = [
        {"num_last": nl, "eta_z": cfg.eta_z[i], "ratio": cfg.ratio[j], "entropy_mean": float(mean[nl][i, j]),
         "entropy_std": float(std[nl][i, j]), "n_seeds": cfg.seeds}
        for nl in cfg.num_last for i in range(len(cfg.eta_z)) for j in range(len(cfg.ratio))
    ]
    claims, misses = _fig6_claims(cfg, mean, prior)
    _fig6_figure(cfg, mean, std, prior, ctx)
    return Result(
        claims,
        metrics={"rows": rows, "prior_entropy": prior},
        figures={"fig6.png": "Fig. 6: average entropy of c_n on distinct tokens vs η_Y/η_Z, one curve per η_Z "
                             f"(mean ± std over {cfg.seeds} seeds); dotted: {PRIOR_ENTROPY_NOTE}."},
        summary=f"{len(rows)} cells x {cfg.seeds} seeds = {len(rows) * cfg.seeds} runs of {cfg.sgd.steps} steps. "
        + ("Curves not highest at η_Y/η_Z = 10: " + "; ".join(misses) + "." if misses else ""),
    )


def _fig6_claims(cfg: Fig6Config, mean: dict, prior: dict) -> tuple[list, list[str]]:
    """The published trends as claims, and a note per curve that misses the peak-at-10 trend."""
    ratios = list(cfg.ratio)
    misses: list[str] = []
    # strict monotonicity along η_Z for every (num_last, ratio) column
    dec = [bool(np.all(np.diff(mean[nl][:, j]) < 0)) for nl in cfg.num_last for j in range(len(ratios))]
    claims = [check("larger η_Z always lowers entropy (fraction of (num_last, η_Y/η_Z) series strictly decreasing in η_Z)",
                    _fraction(dec), 1.0, 0.0, "at_least")]
    if 1 in cfg.num_last:
        inc = [bool(np.all(np.diff(mean[1][i]) > 0)) for i in range(len(cfg.eta_z))]
        claims.append(check("1/2 last/next tokens: entropy rises with η_Y/η_Z (fraction of η_Z curves increasing)",
                            _fraction(inc), 1.0, 0.0, "at_least"))
    many = [nl for nl in cfg.num_last if nl > 1]
    if many and 1.0 in ratios and 2.0 in ratios:
        i1, i2 = ratios.index(1.0), ratios.index(2.0)
        dip = [bool(mean[nl][i, i2] < mean[nl][i, i1]) for nl in many for i in range(len(cfg.eta_z))]
        claims.append(check("3/6, 5/10, 10/20: entropy dips at η_Y/η_Z = 2 (fraction of curves with H(2) < H(1))",
                            _fraction(dip), 1.0, 0.0, "at_least"))
    if many and 10.0 in ratios:
        i10 = ratios.index(10.0)
        peak = {(nl, i): int(np.argmax(mean[nl][i])) for nl in many for i in range(len(cfg.eta_z))}
        top = [p == i10 for p in peak.values()]
        misses = [f"{nl}/{nl * cfg.data.num_next_per_last} at η_Z = {cfg.eta_z[i]:g}: highest at η_Y/η_Z = "
                  f"{ratios[p]:g} (H = {mean[nl][i][p]:.3f} vs {mean[nl][i][i10]:.3f} at 10)"
                  for (nl, i), p in peak.items() if p != i10]
        claims.append(check("3/6, 5/10, 10/20: entropy is highest at η_Y/η_Z = 10 (fraction of curves)",
                            _fraction(top), 1.0, 0.0, "at_least"))
    below = [bool(mean[nl][i, j] < prior[nl]) for nl in cfg.num_last
             for i in range(len(cfg.eta_z)) for j in range(len(ratios))]
    claims.append(check(f"attention sparsifies: every cell's entropy is below the {PRIOR_ENTROPY_NOTE} (fraction)",
                        _fraction(below), 1.0, 0.0, "at_least"))
    return claims, misses


def _fig6_figure(cfg: Fig6Config, mean: dict, std: dict, prior: dict, ctx) -> None:
    fig, axes = plt.subplots(1, len(cfg.num_last), figsize=(3.2 * len(cfg.num_last), 3.2), squeeze=False)
    for ax, nl in zip(axes[0], cfg.num_last):
        for i, ez in enumerate(cfg.eta_z):
            ax.errorbar(cfg.ratio, mean[nl][i], std[nl][i], marker="o", ms=3, capsize=2, label=rf"$\eta_Z={ez:g}$")
        ax.axhline(prior[nl], color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xticks(cfg.ratio, [f"{r:g}" for r in cfg.ratio])
        ax.set_title(f"#last/next tokens = {nl}/{nl * cfg.data.num_next_per_last}")
        ax.set_xlabel(r"$\eta_Y/\eta_Z$")
    axes[0][0].set_ylabel(r"average entropy of $c_n$ (distinct tokens)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    ctx.savefig(fig, "fig6.png")


# --------------------------------------------------------------------------- theorems
@dataclass(frozen=True)
class TheoremsConfig:
    data: SeqClassConfig = SeqClassConfig()  # K = 2 classes sharing one query, 10 commons
    single_common: int = 1  # num_common of the Theorem 2(b) run (|G_CT| = 1)
    eta_z: float = 1.0
    ratios: tuple[float, ...] = (10.0, 100.0)  # η_Y/η_Z: the theorems assume η_Y ≫ η_Z
    t_max: float = 1e6  # flow time (one SGD step at lr η is Δt = 1)
    n_times: int = 600  # log-spaced report times
    sgd_T: tuple[int, ...] = (128, 1024)  # sequence lengths of the SGD-vs-ODE runs
    sgd_batch: int = 1024
    sgd_dt: float = 0.05  # SGD learning rate = η · dt (no momentum), so one step is Δt = dt
    sgd_t_end: float = 40.0
    sgd_ratio: float = 2.0
    seeds: int = 2  # seeds of the SGD-vs-ODE comparison (default init)

    def __post_init__(self):
        _positive("eta_z", self.eta_z)
        _positive("ratios", self.ratios)
        _positive("sgd_ratio", self.sgd_ratio)
        if self.t_max <= 0 or self.n_times < 10 or self.sgd_dt <= 0 or self.sgd_t_end <= self.sgd_dt:
            raise ConfigError("need t_max > 0, n_times >= 10 and 0 < sgd_dt < sgd_t_end")
        if self.seeds < 1 or self.sgd_batch < 1 or min(self.sgd_T) < 2:
            raise ConfigError("need seeds >= 1, sgd_batch >= 1 and every sgd_T >= 2")


@register(
    "scansnap-theorems",
    "Theorems 2-4 on the T→∞ flow (token fates, relative gain, scan→snap) and ODE vs large-batch SGD.",
    TheoremsConfig,
    quick={"t_max": 1e5, "n_times": 300, "sgd_T": (128, 512), "sgd_batch": 512, "sgd_t_end": 20.0, "seeds": 1},
)
def run_theorems(cfg: TheoremsConfig, ctx) -> Result:
    t = np.concatenate([[0.0], np.logspace(-3, np.log10(cfg.t_max), cfg.n_times)])
    dist = SeqClassDistribution(cfg.data)
    dist1 = SeqClassDistribution(replace(cfg.data, num_common=cfg.single_common))
    claims, metrics, traces = [], {}, {}
    total = 2 * len(cfg.ratios) + len(cfg.sgd_T) * cfg.seeds
    with ctx.progress(total, "scansnap-theorems") as bar:
        signs = {}
        for name, d in (("all_commons", dist), ("single_common", dist1)):
            for ratio in cfg.ratios:
                ey = cfg.eta_z * ratio
                zero = torch.zeros(d.M, d.M, dtype=torch.float64)
                sol = integrate_flow(d, zero, zero, ey, cfg.eta_z, t)
                dZ = z_rates(d, sol, ey, cfg.eta_z)
                signs[(name, ratio)] = theorem2_signs(d, dZ, t)
                if name == "all_commons":
                    gain = theorem3_relative_gain(d, sol, dZ, cfg.eta_z)
                    traces[ratio] = (sol, dZ, gain, theorem4_scan_snap(d, gain, ey, cfg.eta_z))
                bar.update()
        sgd = _sgd_vs_ode(cfg, bar, ctx.device)

    claims.append(check("Theorem 2(a): dz_ml/dt > 0 for every distinct token, all t > 0 (fraction)",
                        min(s["distinct_positive_fraction"] for s in signs.values()), 1.0, 0.0, "at_least"))
    claims.append(check("Theorem 2(b): dz_ml/dt < 0 for the single common token, all t > 0 (fraction)",
                        min(s["common_negative_fraction"] for (n, _), s in signs.items() if n == "single_common"),
                        1.0, 0.0, "at_least"))
    claims.append(check(f"all {cfg.data.num_common} common tokens (beyond Theorem 2(b)'s |G_CT| = 1): dz_ml/dt < 0, all t > 0 (fraction)",
                        min(s["common_negative_fraction"] for (n, _), s in signs.items() if n == "all_commons"),
                        1.0, 0.0, "at_least"))
    r_lo, r_hi = min(cfg.ratios), max(cfg.ratios)
    err_hi = traces[r_hi][2].closed_form_rel_error
    claims.append(check(f"Theorem 3: r_(l0/l')(t) = r(0) χ_l0(t) at η_Y/η_Z = {r_hi:g} (max relative error over t, l')",
                        err_hi, 0.0, 0.10, "at_most"))
    if r_hi > r_lo:
        claims.append(check(f"Theorem 3 needs η_Y ≫ η_Z: closed-form error shrinks from η_Y/η_Z = {r_lo:g} to {r_hi:g} "
                            "(error ratio)", err_hi / traces[r_lo][2].closed_form_rel_error, 1.0, 0.0, "at_most"))
    claims.append(check("Theorem 3 bounds exp(2 f²(0) B_n) <= χ_l0 <= exp(2 B_n) for the dominant token, within B_n's "
                        "measured uncertainty (fraction of t, all ratios)",
                        min(g.bounds_hold_fraction for _, _, g, _ in traces.values()), 1.0, 0.0, "at_least"))
    for ratio, (_, _, _, th4) in traces.items():
        claims.append(check(f"Theorem 4 (η_Y/η_Z = {ratio:g}): scan→snap transition (peak of dB_n/dt) at t0 = 2K ln M/η_Y "
                            "(t_peak/t0, same order)", th4["peak_over_t0"], 1.0, 10.0, "factor"))
        claims.append(check(f"Theorem 4 (η_Y/η_Z = {ratio:g}): B_n(t >= t0) ≈ ln(C0 + 2K(η_Z/η_Y) ln²(Mη_Y t/K)), C0 fitted (R²)",
                            th4["fit_r2"], 1.0, 0.1, "at_least"))
        claims.append(check(f"Theorem 4 (η_Y/η_Z = {ratio:g}): coefficient of ln² fitted freely vs 2Kη_Z/η_Y (ratio, within 2x)",
                            th4["free_fit_a"] / th4["predicted_a"], 1.0, 2.0, "factor"))
    T_lo, T_hi = min(cfg.sgd_T), max(cfg.sgd_T)
    claims.append(check(f"population ODE ≡ large-batch small-step SGD: relative error of Z at t = {cfg.sgd_t_end:g} (T = {T_hi})",
                        sgd["final_error"][T_hi], 0.0, 0.05, "at_most"))
    if T_hi > T_lo:
        claims.append(check(f"the gap is finite-T bias: error at T = {T_hi} over error at T = {T_lo}",
                            sgd["final_error"][T_hi] / sgd["final_error"][T_lo], 1.0, 0.0, "at_most"))

    metrics["theorem2"] = {f"{n}@ratio{r:g}": s for (n, r), s in signs.items()}
    metrics["theorem3"] = {f"ratio{r:g}": {"closed_form_rel_error": g.closed_form_rel_error,
                                           "bounds_hold_fraction": g.bounds_hold_fraction,
                                           "bounds_tolerance": g.bounds_tolerance, "xi_fit_residual": g.xi_fit_residual,
                                           "f2_l0_init": g.f2_l0_init}
                           for r, (_, _, g, _) in traces.items()}
    metrics["theorem4"] = {f"ratio{r:g}": {k: v for k, v in th4.items() if not k.startswith("fit_") or k in
                                           ("fit_C0", "fit_r2", "fit_max_abs_error")}
                           for r, (_, _, _, th4) in traces.items()}
    metrics["sgd_vs_ode"] = {"t": sgd["t"], "rel_error": {str(k): v for k, v in sgd["curve"].items()}}
    metrics["ode_solver"] = {f"ratio{r:g}": sol.stats for r, (sol, _, _, _) in traces.items()}
    _theorems_figures(cfg, dist, t, traces, sgd, ctx)
    summary = ("Population flow integrated from zero init with LSODA (error-controlled, stiff-safe). "
               "Theorem 3/4 quantities are for class 1; both classes are symmetric. "
               "B_n(t) = η_Z ∫ξ_n, with ξ_n(t) estimated by least squares from dz/dt = η_Z ξ_n f² over the "
               "distinct tokens other than l0. ")
    th = {r: v[3] for r, v in traces.items()}
    summary += ("Theorem 4, fitted over t >= t0: with the predicted coefficient 2Kη_Z/η_Y the form reaches R² = "
                + ", ".join(f"{th[r]['fit_r2']:.2f} (η_Y/η_Z = {r:g})" for r in th)
                + "; with the coefficient free, a_fit/a_pred = "
                + ", ".join(f"{th[r]['free_fit_a'] / th[r]['predicted_a']:.2f}" for r in th)
                + " and R² = " + ", ".join(f"{th[r]['free_fit_r2']:.2f}" for r in th)
                + ". The transition time matches t0 closely, and B_n's late growth has the ln-ln shape, but the "
                "theorem's constant is only right to within a factor of about 2 (it is an O(·) asymptotic).")
    return Result(claims, metrics, {
        "theorem2_signs.png": "Theorem 2: dz_ml/dt over time for distinct (green) and common (red) tokens.",
        "theorem3_gain.png": "Theorem 3: relative gain r(t) vs closed form r(0)χ(t); χ_l0 between its B_n bounds.",
        "theorem4_snap.png": "Theorem 4: B_n(t), its fit, the transition t_peak vs t0 = 2K ln M/η_Y.",
        "ode_vs_sgd.png": "Relative error of Z between large-batch small-step SGD and the population ODE.",
    }, summary)


def _sgd_vs_ode(cfg: TheoremsConfig, bar, device) -> dict:
    """Relative error ||Z_sgd(t) − Z_ode(t)|| / ||Z_ode(t) − Z(0)|| over time, mean over seeds."""
    ey, ez = cfg.eta_z * cfg.sgd_ratio, cfg.eta_z
    steps = int(round(cfg.sgd_t_end / cfg.sgd_dt))
    marks = np.unique(np.linspace(0, steps, 41).astype(int))[1:]
    t = marks * cfg.sgd_dt
    curves, final = {}, {}
    for T in cfg.sgd_T:
        d = SeqClassDistribution(replace(cfg.data, T=T))
        errs = []
        for seed in range(1, cfg.seeds + 1):
            res = train_sweep(d, torch.tensor([ez * cfg.sgd_dt]), torch.tensor([ey * cfg.sgd_dt]), [seed],
                              SGDConfig(steps=steps, batch_size=cfg.sgd_batch, momentum=0.0), device,
                              snapshot_steps=[0, *marks])
            Z0 = res.snapshots[0][1][0, 0].double()
            sol = integrate_flow(d, res.snapshots[0][0][0, 0], Z0, ey, ez, t)
            errs.append([float((res.snapshots[k][1][0, 0].double() - sol.Z[i]).norm() / (sol.Z[i] - Z0).norm())
                         for i, k in enumerate(marks)])
            bar.update()
        curves[T] = np.mean(errs, 0).tolist()
        final[T] = curves[T][-1]
    return {"t": t.tolist(), "curve": curves, "final_error": final}


def _theorems_figures(cfg, dist, t, traces, sgd, ctx) -> None:
    ratio = max(cfg.ratios)
    sol, dZ, gain, th4 = traces[ratio]
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
    ctx.savefig(fig, "theorem2_signs.png")

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
    ctx.savefig(fig, "theorem3_gain.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for r, (_, _, g, th) in traces.items():
        ax.plot(t[live], g.B[live], label=rf"$B_n$, $\eta_Y/\eta_Z={r:g}$")
        ax.plot(th["fit_t"], th["fit_curve"], "k:", lw=1)
        ax.axvline(th["t0"], color="gray", ls="--", lw=0.7)
        ax.axvline(th["t_peak"], color="tab:orange", ls="-", lw=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("t")
    ax.set_title(r"Theorem 4: $B_n(t)$; dotted fit, dashed $t_0$, orange peak of $dB_n/dt$")
    ax.legend(fontsize=8)
    ctx.savefig(fig, "theorem4_snap.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for T, curve in sgd["curve"].items():
        ax.plot(sgd["t"], curve, marker=".", label=f"T = {T}")
    ax.set_yscale("log")
    ax.set_xlabel("t (= step · dt)")
    ax.set_ylabel(r"$\|Z_{SGD}-Z_{ODE}\|/\|Z_{ODE}-Z_0\|$")
    ax.set_title(f"ODE vs SGD (batch {cfg.sgd_batch}, dt {cfg.sgd_dt:g})")
    ax.legend()
    ctx.savefig(fig, "ode_vs_sgd.png")

