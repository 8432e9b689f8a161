"""``scansnap-theorem4-sweep``: is Theorem 4's failing constant a finite-size effect?

``scansnap-theorems`` finds B_n(t)'s late growth ln-ln shaped, but the form with its predicted constant,
ln(C0 + 2K(η_Z/η_Y) ln²(Mη_Y t/K)), fits with R² ≈ 0.65. The theorem is asymptotic: if that failure is
finite-size, it must shrink as the asymptotic variables grow. The flow here is already the T → ∞ limit of
the sequence length (the population dynamics), so the two left are the time t (the horizon the fit sees)
and the vocabulary M (grown the paper's way, by the number of queries ``num_last``: M = 10 + 11K/2 + ... with
K = 2·num_last classes). Each (M, η_Y/η_Z) flow is integrated once to the longest horizon; each horizon
then refits on its prefix. Measured per cell:

- R² of the form with the predicted constant (C0 fitted) over t0 <= t <= horizon, as the original claim;
- the *local* constant a_eff(t) = e^{B_n(t)} / ln²(Mη_Y t/K): the form's coefficient read off at time t
  (C0 fits to ~1e-10, negligible). If the theorem's constant is the asymptotic one, a_eff/a_pred -> 1.

The claims are the theorem's, stated as a finite-size account would have them, fixed before the first run.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.theorems import check_flow, theorem4_scan_snap


@dataclass(frozen=True)
class Theorem4SweepConfig:
    data: SeqClassConfig = SeqClassConfig()  # scansnap-theorems' data; num_last is swept
    num_last: tuple[int, ...] = (1, 2, 3, 5)  # M = 33, 56, 79, 125 (num_last = 10: LSODA's Jacobian needs 27 GB)
    ratios: tuple[float, ...] = (10.0, 100.0)  # η_Y/η_Z, as scansnap-theorems
    eta_z: float = 1.0
    horizons: tuple[float, ...] = (1e4, 1e6, 1e8, 1e10, 1e12)  # the fit's last time; scansnap-theorems stops at 1e6
    points_per_decade: int = 30  # log-spaced report times from 1e-3
    r2_min: float = 0.9  # the original claim's threshold (R² >= 1 - 0.1)
    factor: float = 2.0  # "the constant is right" within this factor

    def __post_init__(self):
        if not self.num_last or min(self.num_last) < 1 or not self.ratios or min(self.ratios) <= 0:
            raise ConfigError("num_last and ratios need positive values, e.g. --set num_last=1,2 --set ratios=10")
        if sorted(self.horizons) != list(self.horizons) or min(self.horizons, default=0) <= 1:
            raise ConfigError(f"horizons={self.horizons}: give increasing times > 1, e.g. --set horizons=1e4,1e8")
        if self.points_per_decade < 5 or self.factor <= 1:
            raise ConfigError("need points_per_decade >= 5 and factor > 1")


def sweep_cell(dist: SeqClassDistribution, ratio: float, cfg: Theorem4SweepConfig) -> dict:
    """One flow to the longest horizon; the fit and the local constant at every horizon."""
    top = max(cfg.horizons)
    n = int(cfg.points_per_decade * (np.log10(top) + 3))
    t = np.concatenate([[0.0], np.logspace(-3, np.log10(top), n)])
    eta_y = cfg.eta_z * ratio
    flow = check_flow(dist, eta_y, cfg.eta_z, t)
    a_pred = 2 * dist.K * cfg.eta_z / eta_y
    out = {"M": dist.M, "K": dist.K, "a_pred": a_pred, "r2": [], "free_r2": [], "a_free_ratio": [], "a_local_ratio": []}
    for h in cfg.horizons:
        keep = t <= h * (1 + 1e-9)
        prefix = replace(flow.gain, t=t[keep], xi=flow.gain.xi[keep], B=flow.gain.B[keep])
        fit = theorem4_scan_snap(dist, prefix, eta_y, cfg.eta_z)
        i = int(np.flatnonzero(keep)[-1])
        a_eff = np.exp(flow.gain.B[i]) / np.log(dist.M * eta_y * t[i] / dist.K) ** 2
        out["r2"].append(fit["fit_r2"])
        out["free_r2"].append(fit["free_fit_r2"])
        out["a_free_ratio"].append(fit["free_fit_a"] / a_pred)
        out["a_local_ratio"].append(float(a_eff / a_pred))
    out["t"], out["a_local_curve"] = _local_curve(flow.gain.t, flow.gain.B, dist, eta_y, a_pred)
    return out


def _local_curve(t, B, dist, eta_y, a_pred):
    """a_eff(t)/a_pred at the report times past the snap, for the figure."""
    late = t > 10 * 2 * dist.K * np.log(dist.M) / eta_y
    tl = t[late]
    return tl.tolist(), (np.exp(B[late]) / np.log(dist.M * eta_y * tl / dist.K) ** 2 / a_pred).tolist()


@register("scansnap-theorem4-sweep", "Theorem 4's constant as the horizon and the vocabulary grow: finite-size, "
          "or not", Theorem4SweepConfig, quick={"num_last": (1, 2), "ratios": (10.0,), "horizons": (1e4, 1e6, 1e8)})
def run_theorem4_sweep(cfg: Theorem4SweepConfig, ctx) -> Result:
    from attnlab.theory.scansnap.plots import theorem4_sweep

    cells = {}
    with ctx.progress(len(cfg.num_last) * len(cfg.ratios), "Theorem 4 flows") as bar:
        for nl in cfg.num_last:
            dist = SeqClassDistribution(replace(cfg.data, num_last=nl))
            for ratio in cfg.ratios:
                cells[(nl, ratio)] = sweep_cell(dist, ratio, cfg)
                bar.update()
    theorem4_sweep(cells, cfg, ctx)
    claims = _claims(cells, cfg)
    h0, h1 = cfg.horizons[0], cfg.horizons[-1]
    lines = [f"M = {c['M']}, η_Y/η_Z = {r:g}: R² {c['r2'][0]:.2f} → {c['r2'][-1]:.2f}, a_eff/a_pred "
             f"{c['a_local_ratio'][0]:.2f} → {c['a_local_ratio'][-1]:.2f}" for (nl, r), c in cells.items()]
    summary = (f"The T → ∞ flow of scansnap-theorems, integrated to t = {h1:g} for M = "
               f"{', '.join(str(c['M']) for (nl, r), c in cells.items() if r == cfg.ratios[0])} and η_Y/η_Z = "
               f"{', '.join(f'{r:g}' for r in cfg.ratios)}; from horizon {h0:g} to {h1:g}:\n"
               + "\n".join(f"- {line}" for line in lines))
    metrics = {"cells": {f"num_last{nl}@ratio{r:g}": c for (nl, r), c in cells.items()},
               "horizons": list(cfg.horizons)}
    return Result(claims, metrics, {
        "theorem4_sweep.png": "Theorem 4's constant as the asymptotic variables grow: left, R² of the form with "
                              "the predicted constant vs the fit's horizon; right, the local constant "
                              "e^{B_n}/ln²(Mη_Y t/K) over 2Kη_Z/η_Y along t (band: within 2x).",
    }, summary)


def _claims(cells: dict, cfg: Theorem4SweepConfig) -> list:
    claims = []
    h0, h1 = cfg.horizons[0], cfg.horizons[-1]
    for ratio in cfg.ratios:
        row = [c for (nl, r), c in cells.items() if r == ratio]
        fit = check(f"finite-size: at the longest horizon (t = {h1:g}) the form with the predicted constant "
                    f"fits B_n with R² >= {cfg.r2_min:g} at every M (η_Y/η_Z = {ratio:g}; min over M)",
                    min(c["r2"][-1] for c in row), cfg.r2_min, 0.0, "at_least")
        rising = all(np.all(np.diff(c["r2"]) > 0) for c in row)
        lows = ", ".join(f"{min(c['r2'][i] for c in row):.2f}" for i in range(len(cfg.horizons)))
        claims.append(fit.failing_because(
            f"min R² over M by horizon: {lows} at t = {', '.join(f'{x:g}' for x in cfg.horizons)}; "
            + ("it rises with the horizon at every M: B_n approaches the ln-ln form, but slowly (the form's "
               "variable is ln ln t), and the approach is unfinished at the longest horizon integrated"
               if rising else "it does not rise with the horizon at every M: not a finite-time shortfall")))
        if len(cfg.horizons) > 1:
            shrinks = [abs(np.log(c["a_local_ratio"][-1])) < abs(np.log(c["a_local_ratio"][0])) for c in row]
            trend = check(f"finite-size: the constant's error |ln(a_eff/a_pred)| shrinks from t = {h0:g} to {h1:g} "
                          f"at every M (η_Y/η_Z = {ratio:g}; fraction of M)", float(np.mean(shrinks)), 1.0, 0.0,
                          "at_least")
            paths = [_path(c, h0) for c, ok in zip(row, shrinks) if not ok]
            claims.append(trend.failing_because(
                "where it does not, " + "; ".join(paths)))
        for c in row:
            claims.append(check(f"Theorem 4's constant 2Kη_Z/η_Y is B_n's asymptotic one: a_eff(t = {h1:g}) / a_pred "
                                f"within {cfg.factor:g}x (M = {c['M']}, K = {c['K']}, η_Y/η_Z = {ratio:g})",
                                c["a_local_ratio"][-1], 1.0, cfg.factor, "factor"))
    return claims


def _path(c: dict, h0: float) -> str:
    """How the local constant travels from the first horizon to the last: across the prediction, back toward it
    from a peak, or away from it."""
    t, a = np.array(c["t"]), np.array(c["a_local_curve"])
    peak = a[t >= h0].max()
    start, end = c["a_local_ratio"][0], c["a_local_ratio"][-1]
    head = f"M = {c['M']}: {start:.2f} at the first horizon, {end:.2f} at the last"
    if (start - 1) * (end - 1) < 0:
        return head + " (it crossed the prediction and overshot: the approach is not monotone)"
    if end > 1 and peak > end:
        return head + f" (past a peak of {peak:.2f}, falling back toward the prediction)"
    return head + " (moving away from the prediction: not a finite-time shortfall)"
