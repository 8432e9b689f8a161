"""The "modified MLP" ODEs of JoMA (Tian et al., ICLR 2024), Theorems 2-4, and their integrator.

Folding self-attention into the MLP leaves one scalar v_l per contextual token l (a
"component"); with exp attention (Theorem 1, K = 1, z_l = v_l²/2) the dynamics are
component-wise:

    linear activation      dv/dt = Δ ∘ exp(v²/s),        v(0) = 0,   s = 2
    nonlinear activation   dv/dt = (μ − v) ∘ exp(v²/s),  v(0) = v0 small

with Δ_l = E[g|l] P[l|m] (discriminancy × co-occurrence). ``s`` is kept as a parameter
(``scale``) because the paper's stated invariant erf(v/2)/Δ belongs to s = 4, not s = 2:

    ∫_0^v e^{-x²/s} dx = (√(πs)/2) erf(v/√s) = Δ t   =>   erf(v_l/√s)/Δ_l = 2t/√(πs) for every l,

so v_l(t) = √s erfinv(2Δ_l t/√(πs)), and a component with Δ_l ≠ 0 diverges (to ±∞, the
sign of Δ_l) at t_l* = √(πs)/(2|Δ_l|); for s = 2 that is √(π/2)/|Δ_l|.

The attention the MLP sees is softmax(v²/2) over components; :func:`attention` gives it
and entropies go through :func:`attnlab.core.metrics.attention_entropy`.
:func:`authors_softmax_simulation` is the authors' discrete Euler simulation
(``draw_figure_4.py``): v ← v + η (μ − v) ∘ softmax(v²/τ).

Every function is vectorised over a leading batch of (seeds, configs): arrays are (..., M).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from scipy.integrate import solve_ivp
from scipy.special import erf, erfinv

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import attention_entropy


# --------------------------------------------------------------------------- right-hand sides
def linear_rhs(v: np.ndarray, delta: np.ndarray, scale: float = 2.0) -> np.ndarray:
    """dv/dt = Δ ∘ exp(v²/scale) (Theorem 2, linear activation). v, delta: (..., M)."""
    return delta * np.exp(v * v / scale)


def nonlinear_rhs(v: np.ndarray, mu: np.ndarray, scale: float = 2.0) -> np.ndarray:
    """dv/dt = (μ − v) ∘ exp(v²/scale) (Theorems 3-4, nonlinear activation). v, mu: (..., M)."""
    return (mu - v) * np.exp(v * v / scale)


def nonlinear_jac_diag(v: np.ndarray, mu: np.ndarray, scale: float = 2.0) -> np.ndarray:
    """∂(dv_l/dt)/∂v_l of :func:`nonlinear_rhs` (diagonal Jacobian)."""
    return np.exp(v * v / scale) * ((mu - v) * 2.0 * v / scale - 1.0)


def softmax_rhs(v: np.ndarray, mu: np.ndarray, tau: float) -> np.ndarray:
    """dv/dt = (μ − v) ∘ softmax(v²/τ): the continuous limit of the authors' simulation."""
    z = v * v / tau
    a = np.exp(z - z.max(-1, keepdims=True))
    return (mu - v) * a / a.sum(-1, keepdims=True)


def attention(v, tau: float = 2.0) -> torch.Tensor:
    """softmax(v²/τ) over components: (..., M) -> (..., M), float64 unless v is a tensor."""
    v = v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v, dtype=np.float64))
    return torch.softmax(v * v / tau, dim=-1)


# --------------------------------------------------------------------------- closed forms
def linear_closed_form(delta, t, scale: float = 2.0) -> np.ndarray:
    """v(t) = √s erfinv(2Δt/√(πs)) of the linear ODE, valid for t < t_l*.

    delta: (..., M), t: (N,) -> (N, ..., M); ±inf at and after a component's blow-up.
    """
    delta, t = np.asarray(delta, dtype=float), np.asarray(t, dtype=float)
    arg = 2.0 * delta * t.reshape((-1,) + (1,) * delta.ndim) / np.sqrt(np.pi * scale)
    return np.sqrt(scale) * erfinv(np.clip(arg, -1.0, 1.0))


def linear_blowup_time(delta, scale: float = 2.0) -> np.ndarray:
    """t* = √(πs)/(2 max|Δ|) over the last axis: the first divergence. (..., M) -> (...)."""
    return np.sqrt(np.pi * scale) / (2.0 * np.abs(np.asarray(delta, dtype=float)).max(-1))


def erf_invariant(v, delta, scale: float = 2.0) -> np.ndarray:
    """erf(v/√scale)/Δ, elementwise. Equal across l (= 2t/√(π·scale)) iff v solves dv/dt = Δ exp(v²/scale)."""
    with np.errstate(invalid="ignore", divide="ignore"):  # Δ_l = 0 gives NaN (0/0): excluded by callers
        return erf(np.asarray(v) / np.sqrt(scale)) / np.asarray(delta)


def invariant_spread(inv: np.ndarray, keep: np.ndarray) -> float:
    """max over time of (max_l − min_l)/|mean_l| of an invariant (N, ..., M) over components ``keep`` (..., M).

    Rows with t = 0 (all-zero invariant) are skipped: there the ratio is 0/0.
    """
    x = np.where(keep, inv, np.nan)
    mean = np.nanmean(x, -1)
    spread = (np.nanmax(x, -1) - np.nanmin(x, -1)) / np.abs(mean)
    return float(np.nanmax(np.where(mean != 0, spread, np.nan)))


# --------------------------------------------------------------------------- integrator
@dataclass
class Trajectory:
    """An integrated trajectory. t: (N,); v: (N, ...shape of v0) float64.

    diverged: True when max|v| reached ``cap`` (terminal event) or the solver's step size
    collapsed (both mean finite-time blow-up); t_blowup is then that time and ``component``
    the index (into v0's shape) of the largest |v| there.
    """

    t: np.ndarray
    v: np.ndarray
    diverged: bool
    t_blowup: float = float("nan")
    component: tuple[int, ...] | None = None
    stats: dict = field(default_factory=dict)


def _diagonal_jacobian(jac_diag: Callable[[np.ndarray], np.ndarray], shape: tuple, method: str):
    """The solver's Jacobian from its diagonal: components decouple (sparse; LSODA wants it dense)."""
    from scipy.sparse import diags

    def jac(_t, y):
        d = jac_diag(y.reshape(shape)).ravel()
        return np.diag(d) if method == "LSODA" else diags(d, format="csc")

    return jac


def _cap_event(cap: float):
    """A terminal event when max|v| rises through ``cap``."""
    def hit_cap(_t, y):
        return np.abs(y).max() - cap

    hit_cap.terminal, hit_cap.direction = True, 1.0
    return hit_cap


def integrate(
    rhs: Callable[[np.ndarray], np.ndarray],
    v0,
    t_end: float,
    jac_diag: Callable[[np.ndarray], np.ndarray] | None = None,
    method: str = "DOP853",
    rtol: float = 1e-12,
    atol: float = 1e-14,
    cap: float | None = None,
    t_eval=None,
) -> Trajectory:
    """Integrate the autonomous, component-wise ODE dv/dt = rhs(v) from v0 (any shape) on [0, t_end].

    Adaptive, error-controlled ``solve_ivp`` (DOP853 for the non-stiff linear ODE; Radau or
    LSODA with ``jac_diag`` for the stiff nonlinear one: its rate e^{μ²/2} reaches ~3000).
    With ``cap``, a terminal event stops at max|v| = cap and marks a divergence; nothing is
    ever clipped. Without ``t_eval`` the solver's own accepted steps are returned (accurate
    to rtol/atol, and dense where v moves fast, e.g. just before a blow-up).
    """
    v0 = np.asarray(v0, dtype=np.float64)
    shape = v0.shape

    def f(_t, y):
        return rhs(y.reshape(shape)).ravel()

    options = {} if jac_diag is None else {"jac": _diagonal_jacobian(jac_diag, shape, method)}
    sol = solve_ivp(f, (0.0, float(t_end)), v0.ravel(), method=method, rtol=rtol, atol=atol,
                    events=None if cap is None else _cap_event(cap), t_eval=t_eval, **options)
    stats = {"solver": method, "rtol": rtol, "atol": atol, "nfev": int(sol.nfev), "njev": int(sol.njev),
             "steps": int(len(sol.t)), "status": int(sol.status), "message": str(sol.message)}
    v = sol.y.T.reshape((-1,) + shape)  # (N, ...)
    t = sol.t
    if sol.status == 1:  # terminal event: |v| crossed the cap
        t_b = float(sol.t_events[0][0])
        v_b = sol.y_events[0][0].reshape(shape)
        if t_eval is not None:  # t_eval stops before the event; append the event point
            t, v = np.append(t, t_b), np.concatenate([v, v_b[None]])
        return Trajectory(t, v, True, t_b, np.unravel_index(int(np.abs(v_b).argmax()), shape), stats)
    if sol.status == -1:
        # The step size collapsed below float spacing: only a finite-time singularity does that
        # to these smooth, component-wise ODEs. Reported as divergence at the last time reached.
        if len(t) == 0 or not np.all(np.isfinite(v[-1])):
            raise RuntimeError(f"ODE integration failed: {sol.message}")
        return Trajectory(t, v, True, float(t[-1]), np.unravel_index(int(np.abs(v[-1]).argmax()), shape), stats)
    return Trajectory(t, v, False, stats=stats)


def integrate_linear(delta, scale: float = 2.0, cap: float = 6.0, rtol: float = 1e-12,
                     atol: float = 1e-14) -> Trajectory:
    """The linear ODE from v = 0 for one Δ (M,), run until a component's |v| reaches ``cap``.

    t_end is set past the closed-form blow-up (×1.5) only so the solver has room to reach it;
    the detected time comes from the event, not from the closed form.
    """
    delta = np.asarray(delta, dtype=np.float64)
    if delta.ndim != 1 or not np.any(delta != 0):
        raise ConfigError("delta must be one vector (M,) with at least one non-zero entry, or nothing ever diverges")
    t_end = 1.5 * float(linear_blowup_time(delta, scale))
    return integrate(lambda v: linear_rhs(v, delta, scale), np.zeros_like(delta), t_end,
                     method="DOP853", rtol=rtol, atol=atol, cap=cap)


def integrate_nonlinear(mu, v0, t_end: float, scale: float = 2.0, rtol: float = 1e-13, atol: float = 1e-15,
                        method: str = "Radau") -> Trajectory:
    """The nonlinear ODE dv/dt = (μ − v) ∘ exp(v²/s), μ and v0 (..., M), batched in one stiff solve."""
    mu = np.asarray(mu, dtype=np.float64)
    return integrate(lambda v: nonlinear_rhs(v, mu, scale), np.broadcast_to(v0, mu.shape), t_end,
                     jac_diag=lambda v: nonlinear_jac_diag(v, mu, scale), method=method, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- measurements
def convergence_rates(t, v, mu, window: tuple[float, float] = (1e-3, 1e-8)) -> tuple[np.ndarray, np.ndarray]:
    """Local convergence rate −d ln δ_l/dt, δ_l = |1 − v_l/μ_l|, by least squares.

    For each component, the slope of ln δ_l against t over the samples with
    window[1] <= δ_l <= window[0]. t: (N,), v: (N, ..., M), mu: (..., M) ->
    (rates (..., M), samples used (..., M)); NaN where fewer than 3 samples fall in the window.
    """
    hi, lo = window
    t = np.asarray(t, dtype=float).reshape((-1,) + (1,) * (np.ndim(v) - 1))
    delta = np.abs(1.0 - np.asarray(v) / np.asarray(mu))  # (N, ..., M)
    w = ((delta >= lo) & (delta <= hi)).astype(float)
    n = w.sum(0)
    y = np.log(np.where(w > 0, delta, 1.0))
    tb = (w * t).sum(0) / np.maximum(n, 1)
    yb = (w * y).sum(0) / np.maximum(n, 1)
    cov = (w * (t - tb) * (y - yb)).sum(0)
    var = (w * (t - tb) ** 2).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n >= 3, -cov / var, np.nan)
    return rate, n.astype(int)


@dataclass
class SoftmaxSimulation:
    """The authors' discrete run. v: (steps + 1, ..., M) including v(0); entropy: (steps, ...),
    entropy[i] = H(softmax(v_i²/τ)) before update i, as in ``draw_figure_4.py``."""

    v: torch.Tensor
    entropy: torch.Tensor


def authors_softmax_simulation(mu: torch.Tensor, v0, eta: float = 0.02, steps: int = 5000,
                               tau: float = 3.0) -> SoftmaxSimulation:
    """v ← v + η (μ − v) ∘ a, a = softmax(v²/τ) (JoMA ``draw_figure_4.py``), in mu's dtype.

    mu: (..., M); v0: scalar or broadcastable to mu. The authors ran float32.
    """
    if tau <= 0 or eta <= 0 or steps < 1:
        raise ConfigError(f"need tau > 0, eta > 0 and steps >= 1 (got tau={tau}, eta={eta}, steps={steps})")
    v = torch.as_tensor(v0, dtype=mu.dtype).expand_as(mu).clone()
    vs = torch.empty((steps + 1, *mu.shape), dtype=mu.dtype)
    hs = torch.empty((steps, *mu.shape[:-1]), dtype=mu.dtype)
    vs[0] = v
    for i in range(steps):  # sequential in time; vectorised over components and batch
        a = torch.softmax(v * v / tau, dim=-1)
        hs[i] = attention_entropy(a)
        v = v + eta * (mu - v) * a
        vs[i + 1] = v
    return SoftmaxSimulation(vs, hs)
