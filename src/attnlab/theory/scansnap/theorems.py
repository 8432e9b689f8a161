"""Theorems 2-4 of Scan&Snap as measured-vs-predicted checks on a population trajectory.

Each function takes a :class:`~attnlab.theory.scansnap.population.FlowSolution` (the T -> ∞
gradient flow, integrated) and returns plain numbers: what was measured beside what the
theorem predicts; :func:`check_flow` integrates one flow and runs them all. The experiments
turn them into claims.

The link between them (THEORY.md §1.4): for a distinct token l of class n the flow reduces,
under Theorem 1's form of the back-propagated gradient, to

    dz_{ml}/dt = η_Z ξ_n(t) f_{nl}²(t),        B_n(t) = η_Z ∫_0^t ξ_n,

one scalar rate ξ_n shared by all distinct tokens of the class. We estimate ξ_n(t) by least
squares over the distinct tokens other than the dominant one l0 (so the bounds on l0 are
checked against a B_n that did not see l0), and B_n by cumulative Simpson quadrature.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlab.theory.scansnap.data import SeqClassDistribution
from attnlab.theory.scansnap.population import FlowSolution, attention_c, class_features, flow, integrate_flow


def z_rates(dist: SeqClassDistribution, sol: FlowSolution, eta_y: float, eta_z: float, normalize=True, residual=False):
    """dZ/dt along the trajectory: (N, M, M)."""
    return torch.stack([flow(dist, Y, Z, eta_y, eta_z, normalize, residual)[1] for Y, Z in zip(sol.Y, sol.Z)])


def theorem2_signs(dist: SeqClassDistribution, dZ: torch.Tensor, t: np.ndarray) -> dict:
    """Theorem 2 (fates): dz_{ml}/dt > 0 for every distinct token l of every class n
    (m = ψ(n)); dz_{ml}/dt < 0 for common tokens. Evaluated at every t > 0 (at t = 0 from
    zero init the decoder is zero and every rate is exactly 0).

    dZ: (N, M, M). Returns fractions of (time, token) pairs with the predicted sign.
    """
    live = torch.from_numpy(t > 0)
    d_rates = dZ[live][:, dist.query[:, None], dist.distinct]  # (N', K, D)
    c_rates = dZ[live][:, dist.query_ids[:, None], dist.common[None, :]]  # (N', num_last, C)
    return {
        "distinct_positive_fraction": float((d_rates > 0).float().mean()),
        "distinct_min_rate": float(d_rates.min()),
        "common_negative_fraction": float((c_rates < 0).float().mean()) if c_rates.numel() else float("nan"),
        "common_max_rate": float(c_rates.max()) if c_rates.numel() else float("nan"),
    }


@dataclass
class GainTrace:
    """Per-class quantities of Theorem 3 along the trajectory (class n)."""

    t: np.ndarray  # (N,)
    xi: np.ndarray  # (N,) ξ_n(t)
    B: np.ndarray  # (N,) B_n(t) = η_Z ∫ ξ_n (cumulative Simpson)
    xi_fit_residual: float  # max |dz - η_Z ξ f²| / max |dz| over distinct tokens ≠ l0
    chi_l0: np.ndarray  # (N,) χ_{l0}(t) = exp(2 (z_{m l0}(t) - z_{m l0}(0)))
    f2_l0_init: float  # f²_{n l0}(0)
    closed_form_rel_error: float  # max over t, l' of |r_{l0/l'} - r(0) χ_{l0}| / |r(0) χ_{l0}|
    bounds_hold_fraction: float  # fraction of t > 0 with exp(2 f²(0) B) <= χ_{l0} <= exp(2 B)
    bounds_tolerance: float  # relative uncertainty of B_n used to judge the bounds


def theorem3_relative_gain(
    dist: SeqClassDistribution, sol: FlowSolution, dZ: torch.Tensor, eta_z: float, n: int = 0
) -> GainTrace:
    """Theorem 3: r_{l/l'|n}(t) = c²_{l|n}/c²_{l'|n} − 1 = r(0) χ_l(t), and for the dominant
    token l0, exp(2 f²_{nl0}(0) B_n) <= χ_{l0} <= exp(2 B_n). l0 is the distinct token of
    class n with the largest P(l|n)."""
    m, D = dist.query[n], dist.distinct[n]
    l0 = int(torch.argmax(dist.P[n, D]))
    others = torch.tensor([i for i in range(len(D)) if i != l0])
    c = attention_c(dist, sol.Z)[:, n, D]  # (N, D)
    _, _, f = class_features(dist, sol.Z)
    f = f[:, n, D]  # (N, D)
    z = sol.Z[:, m, D]  # (N, D)
    rates = dZ[:, m, D]  # (N, D)

    # ξ_n(t): least squares of rates = η_Z ξ f² over the distinct tokens other than l0
    f2, r_o = f[:, others] ** 2, rates[:, others]
    xi = (r_o * f2).sum(1) / (eta_z * (f2**2).sum(1))  # (N,)
    resid = (r_o - eta_z * xi[:, None] * f2).abs().max() / r_o.abs().max().clamp_min(1e-300)
    xi_np = xi.numpy()
    B, B_err = _cumulative_integral(sol.t, eta_z * xi_np)

    chi = torch.exp(2 * (z - z[0]))  # (N, D)
    r = c[:, l0, None] ** 2 / c[:, others] ** 2 - 1  # (N, D-1): r_{l0/l'}
    pred = r[0] * chi[:, l0, None]
    rel = ((r - pred).abs() / pred.abs().clamp_min(1e-300)).max()

    chi0 = chi[:, l0].numpy()
    f2_0 = float(f[0, l0] ** 2)
    # The bounds in exponent form: ln χ_l0 / (2 B_n) ∈ [f²_l0(0), 1]. Early on f_l0 ≈ f_l0(0)
    # and the lower bound is attained, so judge it within B_n's own uncertainty: the misfit
    # of the one-ξ model (resid) plus the quadrature error — nothing hand-set.
    live = B > 0
    rho = np.log(chi0[live]) / (2 * B[live])
    tol = float(resid) + float(np.max(B_err[live] / B[live]))
    inside = (rho >= f2_0 * (1 - tol)) & (rho <= 1 + tol)
    return GainTrace(sol.t, xi_np, B, float(resid), chi0, f2_0, float(rel), float(inside.mean()), tol)


def _cumulative_integral(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """∫_0^t y by cumulative Simpson, with |Simpson − trapezoid| as its error estimate."""
    from scipy.integrate import cumulative_simpson, cumulative_trapezoid

    simpson = cumulative_simpson(y, x=t, initial=0.0)
    trapezoid = cumulative_trapezoid(y, x=t, initial=0.0)
    return simpson, np.abs(simpson - trapezoid)


def theorem4_form(t: np.ndarray, C0: float, a: float, M: int, K: int, eta_y: float) -> np.ndarray:
    """B_n(t) ~ ln(C0 + a ln²(M η_Y t / K)); Theorem 4 predicts a = 2K η_Z/η_Y."""
    return np.log(C0 + a * np.log(M * eta_y * t / K) ** 2)


def snap_time(dist: SeqClassDistribution, eta_y: float) -> float:
    """t0 = 2K ln M / η_Y: when the decoder's growth turns attention from scanning to snapping."""
    return 2 * dist.K * np.log(dist.M) / eta_y


def theorem4_scan_snap(dist: SeqClassDistribution, trace: GainTrace, eta_y: float, eta_z: float) -> dict:
    """Theorem 4 checks on B_n(t).

    - Transition: the rate dB_n/dt = η_Z ξ_n peaks when scanning turns to snapping; its
      peak time is compared with t0 = 2K ln M/η_Y (an O(·) statement: same order).
    - Form: B_n(t) for t >= t0 fitted with C0 free and the predicted coefficient
      a = 2K η_Z/η_Y (R², max error), and with a free too (how far a_fit is from a).
    """
    from scipy.optimize import curve_fit

    M, K = dist.M, dist.K
    t, B = trace.t, trace.B
    t0 = snap_time(dist, eta_y)
    t_peak = float(t[int(np.argmax(trace.xi))])
    a_pred = 2 * K * eta_z / eta_y
    late = (t >= t0) & (np.log(M * eta_y * np.maximum(t, 1e-300) / K) > 0)

    def r2(pred):
        y = B[late]
        return float(1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())

    (C0,), _ = curve_fit(lambda tt, c0: theorem4_form(tt, c0, a_pred, M, K, eta_y), t[late], B[late],
                         p0=[1.0], bounds=(1e-12, np.inf))
    fixed = theorem4_form(t[late], C0, a_pred, M, K, eta_y)
    (C0f, a_fit), _ = curve_fit(lambda tt, c0, a: theorem4_form(tt, c0, a, M, K, eta_y), t[late], B[late],
                                p0=[1.0, a_pred], bounds=(1e-12, np.inf))
    free = theorem4_form(t[late], C0f, a_fit, M, K, eta_y)
    return {
        "t0": float(t0),
        "t_peak": t_peak,
        "peak_over_t0": t_peak / t0,
        "fit_C0": float(C0),
        "fit_r2": r2(fixed),
        "fit_max_abs_error": float(np.abs(B[late] - fixed).max()),
        "free_fit_C0": float(C0f),
        "free_fit_a": float(a_fit),
        "predicted_a": a_pred,
        "free_fit_r2": r2(free),
        "B_final": float(B[-1]),
        "fit_t": t[late].tolist(),
        "fit_curve": fixed.tolist(),
        "free_fit_curve": free.tolist(),
    }


@dataclass
class FlowChecks:
    """Theorems 2-4 on one integrated flow: ``signs`` (Theorem 2), and for class 1 ``gain``
    (Theorem 3) and ``snap`` (Theorem 4) when asked for. dZ: (N, M, M) along the trajectory."""

    sol: FlowSolution
    dZ: torch.Tensor
    signs: dict
    gain: GainTrace | None = None
    snap: dict | None = None


def check_flow(dist: SeqClassDistribution, eta_y: float, eta_z: float, t: np.ndarray, gain: bool = True) -> FlowChecks:
    """Integrate the population flow from zero init at the times ``t`` (t[0] = 0) and measure Theorem 2's
    signs, and (``gain``) Theorem 3's relative gain and Theorem 4's scan→snap on B_n."""
    zero = torch.zeros(dist.M, dist.M, dtype=torch.float64)
    sol = integrate_flow(dist, zero, zero, eta_y, eta_z, t)
    dZ = z_rates(dist, sol, eta_y, eta_z)
    checks = FlowChecks(sol, dZ, theorem2_signs(dist, dZ, t))
    if gain:
        checks.gain = theorem3_relative_gain(dist, sol, dZ, eta_z)
        checks.snap = theorem4_scan_snap(dist, checks.gain, eta_y, eta_z)
    return checks
