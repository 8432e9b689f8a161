"""Theorem 1 as a measurement: the invariant's prediction ẑ(t) from V(t), its setup, and the runs that test it.

Why the invariants hold (gradient flow, one query token, any loss): with a_k := -∂L/∂(w_kᵀf)·f
projected on U_C, the MLP moves as dV_k/dt = η_W E[φ'_k g_k b] and the attention as
dz/dt = η_z Σ_k (∂b/∂z)ᵀ V_k E[...]. For exp attention ∂b/∂z = diag(b)/τ, so
dz/dt = (η_z/η_W) Σ_k V_k ∘ dV_k/dt / τ, which integrates to z = (η_z/η_W)/(2τ) Σ_k V_k² + c.
Linear attention gives z ∘ dz/dt instead; softmax adds -b bᵀ, which is where b̄ enters.

Gradient *descent* with step η is Euler's method on that flow: each step adds an O(η²)
drift (``exp_step_drift`` gives it exactly), so the error shrinks with the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.joma.model import JomaHistory, JomaLayer, attention, train


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


@dataclass(frozen=True)
class InvariantsConfig:
    # the authors' verification setup (joma/draw_figure_2_3.py)
    num_distinct: int = 10
    num_common: int = 10
    num_classes: int = 20
    hidden: int = 20  # K; linear-φ runs feed h to the loss directly, so K must equal num_classes
    d: int = 30
    embedding: str = "identity"  # identity (authors) | random | path to a .npy/.pt (d, M_c+1) matrix
    seeds: int = 20
    # softmax attention, as published: τ = 0.5, SGD lr 0.1 on W and z, 2000 steps, N(0,1)/100 init
    tau: float = 0.5
    lr: float = 0.1
    steps: int = 2000
    init_std: float = 0.01
    corr_steps: tuple[int, ...] = (500, 2000)
    corr_min: tuple[float, ...] = (0.99, 0.95)
    # linear / exp attention from zero init at a small step, run to time η·steps = horizon
    small_lr: float = 0.02
    horizon: float = 200.0
    max_rel_error: float = 0.01
    relu_init_std: float = 0.1  # the ReLU + head runs start small and random (ReLU'(0) = 0)
    record_every: int = 10

    def __post_init__(self):
        for name in ("num_distinct", "num_classes", "hidden", "d", "seeds", "steps", "record_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)}: use a positive integer")
        if self.num_common < 0:
            raise ConfigError(f"num_common={self.num_common}: use 0 or more")
        for name in ("tau", "lr", "small_lr", "horizon", "init_std", "relu_init_std", "max_rel_error"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ConfigError(f"{name}={getattr(self, name)}: use a positive number")
        if len(self.corr_steps) != len(self.corr_min):
            raise ConfigError("corr_steps and corr_min must have equal length (one threshold per step)")
        if any(not 0 <= s <= self.steps for s in self.corr_steps):
            raise ConfigError(f"corr_steps={self.corr_steps} must lie within 0..steps={self.steps}")
        if self.horizon / self.small_lr > 200_000:
            raise ConfigError(f"horizon/small_lr = {self.horizon / self.small_lr:.0f} steps: keep it under 200000")

    @property
    def num_contextual(self) -> int:
        return self.num_distinct + self.num_common


# --------------------------------------------------------------------------- runs
def cooccurrence_tables(seeds: int, num_distinct: int, num_common: int, num_classes: int, kind: str,
                        gen: torch.Generator) -> torch.Tensor:
    """One P(l|k) table per run, as the authors draw one per run. -> (S, M_c, K)."""
    return torch.stack([cooccurrence_table(num_distinct, num_common, num_classes, kind, gen) for _ in range(seeds)])


def record_steps(steps: int, every: int) -> list[int]:
    """0, every, 2·every, ... and the last step."""
    return sorted(set(range(0, steps + 1, every)) | {steps})


class InvariantRun(NamedTuple):
    """A trained batch of runs and Theorem 1's prediction. h: the history; zh: ẑ (T, S, M_c);
    rel_error: (S,) max_t ‖z − ẑ‖ / max_t ‖z − z(0)‖."""

    h: JomaHistory
    zh: torch.Tensor
    rel_error: torch.Tensor


def exact_invariant_run(U: torch.Tensor, x: torch.Tensor, y: torch.Tensor, form: str, activation: str, head: str,
                        lr: float, steps: int, hidden: int, init_std: float, record_every: int,
                        on_step: Callable[[int], None] | None = None) -> InvariantRun:
    """Linear or exp attention (the exact invariants), η_z = η_W = lr, S runs: x (S, C, M_c), y (C,).

    Linear φ starts from W = 0 with no head; ReLU (ReLU'(0) = 0) from W ~ N(0, init_std²) and a
    trained linear head ~ N(0, 1/K), both drawn from seed 1 so every case starts from the same draws.
    z starts at 0 for exp attention and at 1 for linear (where z = 0 is stationary: b = x∘z = 0).
    """
    S, M_c, C = x.shape[0], x.shape[-1], int(y.max()) + 1
    d = U.shape[0]
    layer = JomaLayer(U, form, 1.0, activation, "ce", head)
    g = torch.Generator().manual_seed(1)
    if activation == "linear":
        W0, head0 = torch.zeros(S, d, hidden), None
    else:
        W0 = torch.randn(S, d, hidden, generator=g) * init_std
        head0 = torch.randn(S, hidden, C, generator=g) / hidden ** 0.5
    z0 = torch.zeros(S, M_c) if form == "exp" else torch.ones(S, M_c)
    h = train(layer, x, y, W0, z0, lr, lr, steps, head0, record_steps(steps, record_every), on_step)
    zh = zhat(form, h.V, h.z[0])
    return InvariantRun(h, zh, relative_error(h.z, zh))


def softmax_invariant_run(U: torch.Tensor, X: torch.Tensor, y: torch.Tensor, tau: float, lr: float, steps: int,
                          hidden: int, init_std: float, record_every: int, gen: torch.Generator,
                          on_step: Callable[[int], None] | None = None,
                          observe=None) -> tuple[JomaHistory, torch.Tensor, dict]:
    """Softmax attention in the authors' setup: tables X (S, M_c, C), W, z ~ N(0, init_std²) from ``gen``,
    ẑ with their estimate (b̄ = mean attention at z = 0, ‖W‖²_F for the norm term). ``observe``: see ``train``.

    -> (history, Pearson(ẑ, z) (T, S), :func:`softmax_diagnostics`)."""
    S, M_c = X.shape[0], X.shape[1]
    layer = JomaLayer(U, "softmax", tau, "linear", "ce", "none")
    W0 = torch.randn(S, U.shape[0], hidden, generator=gen) * init_std
    z0 = torch.randn(S, M_c, generator=gen) * init_std
    h = train(layer, X.transpose(1, 2).contiguous(), y, W0, z0, lr, lr, steps, None,
              record_steps(steps, record_every), on_step, observe)
    zh = zhat("softmax", h.V, h.z[0], 1.0, tau, bbar=X.mean(-1), norm_sq=h.W_sq)
    return h, pearson(h.z, zh), softmax_diagnostics(h, X.transpose(1, 2), tau)


def zhat_path(h: JomaHistory, x: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(b̄(t) (T, S, M_c), ẑ with the measured b̄(t) and ‖V‖² in the norm term, trapezoid along the recorded
    path (T, S, M_c)). x: (S, C, M_c)."""
    bbar = torch.stack([attention(z, x, "softmax", tau).mean(1) for z in h.z])  # (T, S, M_c)
    norm_sq = h.V.pow(2).sum((-2, -1))  # (T, S)
    step = 0.5 * (bbar[1:] + bbar[:-1]) * norm_sq.diff(dim=0)[..., None]  # (T-1, S, M_c)
    integral = torch.cat([torch.zeros_like(bbar[:1]), step.cumsum(0)])
    q = h.V.pow(2).sum(-1)
    return bbar, h.z[0] + (q - q[0] - integral) / (2 * tau)


def softmax_diagnostics(h: JomaHistory, x: torch.Tensor, tau: float) -> dict:
    """Why softmax's ẑ drifts: how far b̄ moves, and ẑ with the measured b̄(t) in the norm term
    (trapezoid along the recorded path). x: (S, C, M_c)."""
    bbar, zh_path = zhat_path(h, x, tau)
    norm_sq = h.V.pow(2).sum((-2, -1))  # (T, S)
    zh_const = zhat("softmax", h.V, h.z[0], 1.0, tau, bbar=bbar[0], norm_sq=norm_sq)
    return {
        "max_bbar_drift": float((bbar[-1] - bbar[0]).abs().max()),
        "max_bbar_init": float(bbar[0].max()),
        "path_corr_final_median": float(pearson(h.z, zh_path)[-1].median()),
        "authors_corr_final_median": float(pearson(h.z, zh_const)[-1].median()),
    }
