"""Why JoMA's softmax invariant drifts, measured: the decoupling term Theorem 1 drops.

Softmax attention, linear φ, no head, cross-entropy (the authors' verification setup). With V = U_Cᵀ W,
g_k = ∂L/∂h_k for class k, b_k its attention (b_kl = x_kl e^{z_l/τ} / Σ ...) and s_k = b_kᵀ V g_k,

    ∂L/∂z_l = (1/τ) Σ_k b_kl (v_l·g_k − s_k),

so one step of z splits exactly into a *decoupled* part, where Σ_k b_kl s_k is replaced by b̄_l Σ_k s_k
(b̄ = the classes' mean attention: the theorem's condition E[g b bᵀ v] ≈ b̄ E[g bᵀ v]), and the *coupling*

    D_l = Σ_k (b_kl − b̄_l) s_k,

a covariance over classes between the attention on token l and the signal each class's attention carries.
The decoupled part integrates to the theorem's ẑ (to first order in the step, with b̄ held at its start);
the coupling's sum C_l(t) = (η/τ) Σ_{t'<t} D_l(t') is what the theorem leaves out. :class:`CouplingMeter`
accumulates both along a run (``train(..., observe=meter)``).
"""
from __future__ import annotations

import torch

from attnlab.theory.joma.model import JomaLayer, attention


class CouplingMeter:
    """Accumulates, per run, the decoupled part P and the coupling C of z's steps; both (S, M_c), recorded at
    the steps ``record`` (the state after that many updates). z(t) − z(0) = P(t) + C(t) exactly."""

    def __init__(self, layer: JomaLayer, x: torch.Tensor, y: torch.Tensor, eta_z: float, record: list[int]):
        self.layer, self.x, self.y, self.eta = layer, x, y, eta_z  # x: (S, N, M_c) per-run inputs
        self.record = set(record)
        self.P = self.C = None
        self.steps: list[int] = []
        self.P_at: list[torch.Tensor] = []
        self.C_at: list[torch.Tensor] = []

    def __call__(self, t: int, W: torch.Tensor, z: torch.Tensor) -> None:
        if self.P is None:
            self.P, self.C = torch.zeros_like(z), torch.zeros_like(z)
        self._keep(t)
        decoupled, coupling = self.split(W, z)
        self.P += decoupled
        self.C += coupling

    def finish(self, steps: int) -> None:
        """Record the state after the last update (train calls no observer after it)."""
        self._keep(steps)

    def _keep(self, t: int) -> None:
        if t in self.record:
            self.steps.append(t)
            self.P_at.append(self.P.clone())
            self.C_at.append(self.C.clone())

    def split(self, W: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's change of z, −η ∂L/∂z, as (decoupled, coupling), each (S, M_c)."""
        layer, tau = self.layer, self.layer.tau
        with torch.enable_grad():  # g = ∂L/∂h: the loss's gradient at the hidden nodes, per class
            h = layer.hidden(W, z, self.x).requires_grad_(True)  # (S, N, K)
            (g,) = torch.autograd.grad(layer.loss_of_hidden(h, self.y).sum(), h)  # (S, N, K)
        b = attention(z, self.x, "softmax", tau)  # (S, N, M_c)
        V = layer.U_C.T.to(W.dtype) @ W  # (S, M_c, K)
        vg = torch.einsum("slk,snk->snl", V, g)  # (S, N, M_c): v_l · g_k
        s = (b * vg).sum(-1)  # (S, N): s_k = b_kᵀ V g_k
        bbar = b.mean(1, keepdim=True)  # (S, 1, M_c)
        own = (b * vg).sum(1)  # (S, M_c): Σ_k b_kl v_l·g_k
        decoupled = -(self.eta / tau) * (own - bbar[:, 0] * s.sum(1, keepdim=True))
        coupling = (self.eta / tau) * ((b - bbar) * s[..., None]).sum(1)  # Σ_k (b_kl − b̄_l) s_k
        return decoupled, coupling


def centred_ratio(part: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """‖part − mean‖ / ‖whole − mean‖ over the last dim (Pearson ignores shifts): (..., M_c) -> (...)."""
    c = lambda v: v - v.mean(-1, keepdim=True)  # noqa: E731
    return c(part).norm(dim=-1) / c(whole).norm(dim=-1).clamp(min=1e-30)
