"""JoMA Theorems 2-4 measured on the "modified MLP" ODEs, beside their closed forms; the draws of Δ and μ.

* :func:`linear_draw` — Theorem 2 on one Δ: the exact invariant erf(v_l/√2)/Δ_l, the slides'
  erf(v_l/2)/Δ_l (on the stated ODE and on dv/dt = Δ∘exp(v²/4), where it belongs), the blow-up
  of argmax|Δ| at √(π/2)/max|Δ|, the other components there, the attention entropy.
* :func:`nonlinear_rates` — Theorems 3-4: convergence rates −d ln δ_l/dt against e^{μ_l²/2}
  and their pairwise ratios; the entropy of softmax(v²/2) along the way.
* :func:`authors_run` — the authors' softmax Euler simulation (``draw_figure_4.py``) and its
  continuous limit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import erfinv

from attnlab.core.metrics import attention_entropy
from attnlab.theory.joma.ode import (
    SoftmaxSimulation,
    Trajectory,
    attention,
    authors_softmax_simulation,
    convergence_rates,
    erf_invariant,
    integrate,
    integrate_linear,
    integrate_nonlinear,
    invariant_spread,
    linear_blowup_time,
    softmax_rhs,
)

SQRT_PI_2 = math.sqrt(math.pi / 2)
# The authors' draw_figure_4.py: torch.manual_seed(0), μ = sort(3·rand(10) + 1), v0 = 0.05, η = 0.02,
# τ = 3, 5000 steps; published entropy 2.303 at step 0, min ≈ 0.94 near step 670, ≈ 1.55 at 5000.
AUTHORS = {"sim_seed": 0, "sim_components": 10, "mu_low": 1.0, "mu_high": 4.0, "v0": 0.05, "eta": 0.02,
           "tau": 3.0, "steps": 5000}
PUBLISHED = {"min": 0.94, "argmin": 670, "final": 1.55}


def entropy(v: np.ndarray, tau: float = 2.0) -> np.ndarray:
    """H(softmax(v²/τ)) over the last axis, float64."""
    return attention_entropy(attention(v, tau)).numpy()


def draw_delta(seed: int, components: int, common: int, common_scale: float, delta_low: float,
               delta_high: float, mixed_signs: bool = True) -> np.ndarray:
    """Δ (M,): ``common`` near-zero entries U(±common_scale), then distinct ones with
    |Δ| ~ U(delta_low, delta_high) (random signs if ``mixed_signs``), shuffled."""
    rng = np.random.default_rng(seed)
    near_zero = rng.uniform(-common_scale, common_scale, common)
    n = components - common
    sign = rng.choice([-1.0, 1.0], n) if mixed_signs else np.ones(n)
    return rng.permutation(np.concatenate([near_zero, sign * rng.uniform(delta_low, delta_high, n)]))


def draw_mu(seed: int, M: int, low: float, high: float) -> torch.Tensor:
    """sort(U(low, high)) (M,) float32 from torch.Generator().manual_seed(seed): for seed 0, M = 10,
    (1, 4) this is the authors' μ (their torch.manual_seed(0) draws the same stream)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(M, generator=g) * (high - low) + low).sort().values


def linear_draw(delta: np.ndarray, cap: float, rtol: float, atol: float,
                min_delta: float) -> tuple[dict, Trajectory, np.ndarray]:
    """Theorem 2 on one Δ (M,): the stated ODE dv/dt = Δ∘exp(v²/2) and dv/dt = Δ∘exp(v²/4), each
    integrated until max|v| = cap. Invariants are compared over components with |Δ| >= min_delta.

    -> (measured beside predicted, as a flat dict; the stated ODE's trajectory; its entropy (N,)).
    """
    M = len(delta)
    keep = np.abs(delta) >= min_delta
    tr = integrate_linear(delta, 2.0, cap, rtol, atol)  # the stated ODE
    tr4 = integrate_linear(delta, 4.0, cap, rtol, atol)  # dv/dt = Δ∘exp(v²/4)
    live = tr.t > 0
    inv = erf_invariant(tr.v[live], delta, 2.0)  # (N, M)
    l_star = int(np.abs(delta).argmax())
    t_star = float(linear_blowup_time(delta))
    others = np.arange(M) != l_star
    v_b = tr.v[-1]  # (M,) at the detected blow-up
    v_pred = np.sqrt(2) * erfinv(delta / np.abs(delta[l_star]))  # sign-aware √2 erfinv(Δ_l/|Δ_max|)
    H = entropy(tr.v)  # (N,)
    row = {
        "delta": delta.tolist(),
        "diverged": tr.diverged,
        "argmax_abs_delta": l_star,
        "diverging_component": int(tr.component[0]) if tr.diverged else -1,
        "t_blowup": tr.t_blowup,
        "t_star_closed_form": t_star,
        "t_blowup_rel_error": abs(tr.t_blowup / t_star - 1),
        "invariant_spread": invariant_spread(inv, keep),
        "invariant_vs_closed_form": float(np.abs(inv[:, keep] / (tr.t[live, None] / SQRT_PI_2) - 1).max()),
        "slides_form_spread": invariant_spread(erf_invariant(tr.v[live], delta, 4.0), keep),
        "slides_form_spread_on_exp_v2_over_4": invariant_spread(erf_invariant(tr4.v[tr4.t > 0], delta, 4.0), keep),
        "v_at_blowup": v_b.tolist(),
        "others_max_abs_v": float(np.abs(v_b[others]).max()),
        "others_max_error": float(np.abs(v_b[others] - v_pred[others]).max()),
        "entropy_max_increase": float(np.diff(H).max()),
        "entropy_final": float(H[-1]),
        "solver": tr.stats,
    }
    return row, tr, H


@dataclass
class RateCheck:
    """Theorems 3-4 on a batch of μ draws. mu: (S, M); tr: the trajectory (t (N,), v (N, S, M));
    rate, pred: (S, M) measured and e^{μ²/2}; samples: (S, M) samples in the fit window;
    ratio_meas, ratio_pred: (S, pairs) rate(k)/rate(j) over pairs k > j; H: (N, S) entropy of softmax(v²/2)."""

    mu: np.ndarray
    tr: Trajectory
    rate: np.ndarray
    samples: np.ndarray
    pred: np.ndarray
    ratio_meas: np.ndarray
    ratio_pred: np.ndarray
    H: np.ndarray


def nonlinear_rates(mu: np.ndarray, v0: float, t_end: float, window: tuple[float, float], method: str,
                    rtol: float, atol: float) -> RateCheck:
    """dv/dt = (μ − v)∘exp(v²/2) for every μ draw (S, M, sorted) in one stiff solve (components
    decouple), rates fitted over δ_l in ``window`` = (hi, lo)."""
    tr = integrate_nonlinear(mu, v0, t_end, method=method, rtol=rtol, atol=atol)
    t, v = tr.t, tr.v  # (N,), (N, S, M)
    rate, n_used = convergence_rates(t, v, mu, window)  # (S, M)
    pred = np.exp(mu**2 / 2)  # Theorem 4: −d ln δ_l/dt → e^{μ_l²/2}
    j, k = np.triu_indices(mu.shape[-1], 1)  # pairs k > j: μ_k >= μ_j (sorted)
    return RateCheck(mu, tr, rate, n_used, pred, rate[:, k] / rate[:, j], pred[:, k] / pred[:, j], entropy(v))


@dataclass
class AuthorsRun:
    """The authors' Euler run and its continuous limit. H_sim: (steps,) entropy before each update;
    H_ode: (steps + 1,) entropy of the ODE at t = η·step; euler_gap: max |H_sim − H_ode| (nats)."""

    sim: SoftmaxSimulation
    H_sim: np.ndarray
    H_ode: np.ndarray
    i_min: int
    euler_gap: float


def authors_run(mu: torch.Tensor, v0: float, eta: float, steps: int, tau: float) -> AuthorsRun:
    """v ← v + η (μ − v)∘softmax(v²/τ) in mu's dtype, then dv/dt = (μ − v)∘softmax(v²/τ) (DOP853)."""
    sim = authors_softmax_simulation(mu, v0, eta, steps, tau)
    H_sim = sim.entropy.double().numpy()  # (steps,)
    t = eta * np.arange(steps + 1)
    mu_np = mu.double().numpy()
    ode = integrate(lambda x: softmax_rhs(x, mu_np, tau), np.full(len(mu_np), v0), t[-1],
                    method="DOP853", rtol=1e-10, atol=1e-12, t_eval=t)
    H_ode = entropy(ode.v, tau)  # (steps + 1,)
    return AuthorsRun(sim, H_sim, H_ode, int(H_sim.argmin()), float(np.abs(H_sim - H_ode[:steps]).max()))
