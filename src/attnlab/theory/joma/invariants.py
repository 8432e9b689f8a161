"""Theorem 1 as a measurement: the invariant's prediction ẑ(t) from V(t), and its setup.

Why the invariants hold (gradient flow, one query token, any loss): with a_k := -∂L/∂(w_kᵀf)·f
projected on U_C, the MLP moves as dV_k/dt = η_W E[φ'_k g_k b] and the attention as
dz/dt = η_z Σ_k (∂b/∂z)ᵀ V_k E[...]. For exp attention ∂b/∂z = diag(b)/τ, so
dz/dt = (η_z/η_W) Σ_k V_k ∘ dV_k/dt / τ, which integrates to z = (η_z/η_W)/(2τ) Σ_k V_k² + c.
Linear attention gives z ∘ dz/dt instead; softmax adds -b bᵀ, which is where b̄ enters.

Gradient *descent* with step η is Euler's method on that flow: each step adds an O(η²)
drift (``exp_step_drift`` gives it exactly), so the error shrinks with the step.
"""
from __future__ import annotations

import torch

from attnlab.core.errors import ConfigError


def cooccurrence_table(num_distinct: int, num_common: int, num_classes: int, kind: str,
                       gen: torch.Generator) -> torch.Tensor:
    """The authors' X[l, k] = P(l | class k) for Theorem 1's softmax check. -> (M_c, K).

    ``random``: U(0, 0.5) entries; ``gaussian``: the distinct rows replaced by bumps
    exp(-(l - 10k/K)²/30) that move with the class. Columns normalised to sum to 1.
    """
    if kind not in ("random", "gaussian"):
        raise ConfigError(f"table={kind!r}: use random or gaussian")
    X = torch.rand(num_distinct + num_common, num_classes, generator=gen, dtype=torch.float64) / 2
    if kind == "gaussian":
        l = torch.arange(num_distinct, dtype=torch.float64)[:, None]  # (D, 1)
        centre = torch.arange(num_classes, dtype=torch.float64) / num_classes * num_distinct  # (K,)
        X[:num_distinct] = (-(l - centre).pow(2) / 30).exp()
    return X / X.sum(0, keepdim=True)


def zhat(
    form: str,
    V: torch.Tensor,
    z0: torch.Tensor,
    eta_ratio: float = 1.0,
    tau: float = 1.0,
    bbar: torch.Tensor | None = None,
    norm_sq: torch.Tensor | None = None,
) -> torch.Tensor:
    """Theorem 1's prediction of z(t) from V(t), with c fixed so that ẑ(0) = z(0).

    V: (T, ..., M_c, K) with V[0] the initial V; z0: (..., M_c); eta_ratio = η_z/η_W.
    Softmax needs b̄ (M_c,) and takes ``norm_sq`` (T, ...) for the ‖·‖² term: ‖V‖²_F by
    default (the theorem), or ‖W‖²_F (the authors' code). -> ẑ: (T, ..., M_c).
    """
    q = eta_ratio * V.pow(2).sum(-1)  # (T, ..., M_c): (η_z/η_W) Σ_k V_lk²
    dq = q - q[0]
    if form == "exp":
        return z0 + dq / (2 * tau)
    if form == "linear":
        # z² - (η_z/η_W) Σ V² is constant; z keeps its sign (it cannot cross 0 while z² > 0)
        return z0.sign() * (z0.pow(2) + dq).clamp_min(0).sqrt()
    if form == "softmax":
        if bbar is None:
            raise ValueError("softmax invariant needs bbar, the mean attention b̄ (M_c,)")
        s = V.pow(2).sum((-2, -1)) if norm_sq is None else norm_sq  # (T, ...)
        ds = eta_ratio * (s - s[0])
        return z0 + (dq - bbar * ds[..., None]) / (2 * tau)
    raise ValueError(f"unknown attention form {form!r}")


def exp_step_drift(V_before: torch.Tensor, V_after: torch.Tensor, eta_ratio: float, tau: float) -> torch.Tensor:
    """Exact change of z - ẑ over one gradient-descent step with exp attention:
    -(η_z/η_W)/(2τ) Σ_k ΔV_k² (the Euler error; 0 in the flow). V: (..., M_c, K) -> (..., M_c)."""
    return -eta_ratio * (V_after - V_before).pow(2).sum(-1) / (2 * tau)


def pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pearson correlation along the last axis (the authors' normalised correlation). -> (...)."""
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + 1e-30)


def relative_error(z: torch.Tensor, zh: torch.Tensor) -> torch.Tensor:
    """max_t ‖z(t) - ẑ(t)‖ / max_t ‖z(t) - z(0)‖ per run: the invariant's error against the
    distance z travels. z, zh: (T, ..., M_c) -> (...). (A per-time ratio ‖z-ẑ‖/‖z‖ is
    ill-posed from zero init, where z(0) = 0.)"""
    err = (z - zh).norm(dim=-1).amax(0)
    travel = (z - z[0]).norm(dim=-1).amax(0)
    return err / travel
