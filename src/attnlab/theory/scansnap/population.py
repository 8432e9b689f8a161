"""Population dynamics of Scan&Snap: T -> ∞, infinite batch (THEORY.md §1.3).

Lemma 2: given class n (query m = ψ(n)), as T -> ∞ the attention output tends to

    c_{l|n} = P(l|n) e^{z_{ml}} / Σ_{l'} P(l'|n) e^{z_{ml'}},      f_n = c_n / ||c_n||_2,

so the expected loss is L(Y, Z) = Σ_n P(n) CE(softmax(Y f_n), n) and gradient flow reads

    dY/dt   = η_Y Σ_n P(n) (e_n − α_n) f_nᵀ
    dz_m/dt = η_Z Σ_{n∈ψ⁻¹(m)} P(n) diag(f_n) (I − f_n f_nᵀ) Yᵀ (e_n − α_n)

with α_n = softmax(Y f_n). :func:`flow` evaluates this closed form (also with the residual
and without the normalisation); :func:`flow_autograd` is −η ∇L by autograd, its check.
:func:`integrate_flow` integrates it with LSODA (automatic switch between non-stiff Adams
and stiff BDF, error-controlled steps, Jacobian from autograd).

Time: one SGD step at learning rate η moves θ by η·(−∇L), i.e. Δt = 1 in this flow; with
momentum μ the steady-state step is Δt = 1/(1 − μ).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.core.errors import ConfigError
from attnlab.theory.scansnap.data import SeqClassDistribution


def attention_c(dist: SeqClassDistribution, Z: torch.Tensor) -> torch.Tensor:
    """c_{l|n} (Lemma 2). Z: (..., M, M) -> (..., K, M), rows sum to 1."""
    logP = dist.P.to(Z.dtype).log()  # (K, M), -inf off the support
    return torch.softmax(Z[..., dist.query, :] + logP, dim=-1)


def class_features(
    dist: SeqClassDistribution, Z: torch.Tensor, normalize: bool = True, residual: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(c, u, f) per class, each (..., K, M): u = c (+ e_ψ(n)); f = u/||u|| if normalize."""
    c = attention_c(dist, Z)
    u = c + F.one_hot(dist.query, dist.M).to(c.dtype) if residual else c
    f = u / u.norm(dim=-1, keepdim=True) if normalize else u
    return c, u, f


def expected_loss(
    dist: SeqClassDistribution, Y: torch.Tensor, Z: torch.Tensor, normalize: bool = True, residual: bool = False
) -> torch.Tensor:
    """L(Y, Z) = Σ_n P(n) CE(softmax(Y f_n), label_n), classes uniform. Y, Z: (M, M) -> scalar."""
    _, _, f = class_features(dist, Z, normalize, residual)
    logp = torch.log_softmax(f @ Y.T, dim=-1)  # (K, M)
    return -logp.gather(-1, dist.label[:, None]).mean()


def flow(
    dist: SeqClassDistribution,
    Y: torch.Tensor,
    Z: torch.Tensor,
    eta_y: float,
    eta_z: float,
    normalize: bool = True,
    residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dY/dt, dZ/dt), each (M, M), in closed form. Rows of Z that are no query stay still."""
    c, u, f = class_features(dist, Z, normalize, residual)  # (K, M)
    alpha = torch.softmax(f @ Y.T, dim=-1)  # (K, M)
    delta = F.one_hot(dist.label, dist.M).to(Y.dtype) - alpha  # (K, M): e_n − α_n
    p_n = 1.0 / dist.K
    dY = eta_y * p_n * delta.T @ f  # Σ_n P(n)(e_n − α_n) f_nᵀ
    g = delta @ Y  # (K, M): rows Yᵀ(e_n − α_n)
    if normalize:  # Jacobian of u -> u/||u|| is (I − f fᵀ)/||u||
        g = (g - (g * f).sum(-1, keepdim=True) * f) / u.norm(dim=-1, keepdim=True)
    g_z = c * g - c * (c * g).sum(-1, keepdim=True)  # (diag(c) − c cᵀ) g: Jacobian of the softmax
    dZ = torch.zeros_like(Z).index_add_(0, dist.query, eta_z * p_n * g_z)
    return dY, dZ


def flow_autograd(
    dist: SeqClassDistribution,
    Y: torch.Tensor,
    Z: torch.Tensor,
    eta_y: float,
    eta_z: float,
    normalize: bool = True,
    residual: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(−η_Y ∂L/∂Y, −η_Z ∂L/∂Z) by autograd of :func:`expected_loss`."""
    Y = Y.detach().requires_grad_(True)
    Z = Z.detach().requires_grad_(True)
    gY, gZ = torch.autograd.grad(expected_loss(dist, Y, Z, normalize, residual), (Y, Z))
    return -eta_y * gY, -eta_z * gZ


def distinct_entropy(dist: SeqClassDistribution, Z: torch.Tensor) -> torch.Tensor:
    """Entropy of c_n restricted to class n's distinct tokens (the Fig. 6 metric).

    c_l ∝ P(l|n) e^{z_{ml}} over the distinct tokens of n, renormalised. Z: (..., M, M) -> (..., K).
    """
    logP = dist.P.gather(1, dist.distinct).to(Z.dtype).log()  # (K, D)
    c = torch.softmax(Z[..., dist.query[:, None], dist.distinct] + logP, dim=-1)  # (..., K, D)
    return -(c * c.clamp_min(1e-300).log()).sum(-1)


@dataclass
class FlowSolution:
    """ODE trajectory. t: (N,); Y, Z: (N, M, M) float64; stats: solver counters."""

    t: np.ndarray
    Y: torch.Tensor
    Z: torch.Tensor
    stats: dict


def integrate_flow(
    dist: SeqClassDistribution,
    Y0: torch.Tensor,
    Z0: torch.Tensor,
    eta_y: float,
    eta_z: float,
    t_eval: np.ndarray,
    normalize: bool = True,
    residual: bool = False,
    rtol: float = 1e-7,
    atol: float = 1e-9,
) -> FlowSolution:
    """Integrate the population flow from (Y0, Z0) at t = 0, reporting at ``t_eval`` (sorted, >= 0).

    The state is Y and the query rows of Z (the only rows that move). LSODA controls the
    step by its local error estimate and switches to BDF when the problem turns stiff
    (late training, when the decoder saturates); its Jacobian comes from autograd.
    """
    from scipy.integrate import solve_ivp

    if eta_y < 0 or eta_z < 0:
        raise ConfigError("a learning rate is negative: η_Y and η_Z must be >= 0")
    t_eval = np.asarray(t_eval, dtype=float)
    if t_eval.ndim != 1 or len(t_eval) == 0 or t_eval[0] < 0 or np.any(np.diff(t_eval) < 0):
        raise ConfigError("t_eval must be a non-empty sorted 1-d array of times >= 0")
    M, q = dist.M, dist.query_ids
    Y0 = Y0.detach().to(torch.float64)
    Z0 = Z0.detach().to(torch.float64)

    def unpack(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Y = s[: M * M].view(M, M)
        Z = Z0.index_put((q,), s[M * M :].view(len(q), M))  # (M, M): frozen rows from Z0
        return Y, Z

    def rhs_torch(s: torch.Tensor) -> torch.Tensor:
        dY, dZ = flow(dist, *unpack(s), eta_y, eta_z, normalize, residual)
        return torch.cat([dY.flatten(), dZ[q].flatten()])

    jac_fn = torch.func.jacfwd(rhs_torch)
    counters = {"nfev": 0, "njev": 0}

    def rhs(_t, s):
        counters["nfev"] += 1
        return rhs_torch(torch.from_numpy(s)).numpy()

    def jac(_t, s):
        counters["njev"] += 1
        return jac_fn(torch.from_numpy(s)).numpy()

    s0 = torch.cat([Y0.flatten(), Z0[q].flatten()]).numpy()
    sol = solve_ivp(rhs, (0.0, float(t_eval[-1])), s0, method="LSODA", t_eval=t_eval, jac=jac, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"population ODE failed at t={sol.t[-1] if len(sol.t) else 0:.3g}: {sol.message}")
    states = torch.from_numpy(sol.y.T.copy())  # (N, state)
    Ys, Zs = zip(*(unpack(s) for s in states))
    stats = {"solver": "LSODA", "rtol": rtol, "atol": atol, **counters, "state_dim": int(s0.size)}
    return FlowSolution(sol.t, torch.stack(Ys), torch.stack(Zs), stats)
