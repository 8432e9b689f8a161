"""The JoMA layer (Tian et al., ICLR 2024, §3) and Theorem 1's invariants.

One query token q with fixed embedding u_q, M_c contextual tokens with fixed embeddings
U_C (d, M_c); [U_C, u_q] orthonormal. A sample is a count (or frequency) vector x over the
contextual tokens and a class label y::

    b = σ(z) ∘ x / A        attention of the query on the context (softmax / exp / linear)
    f = U_C b + u_q         residual connection from the query
    h_k = φ(w_kᵀ f)         K hidden nodes, φ linear or ReLU (homogeneous)

Trained: W (d, K) and the query's attention logits z (M_c,). Theorem 1 ties them together
through V := U_Cᵀ W (M_c, K): whatever the loss, data or nonlinearity, gradient flow keeps

    linear  b_l = x_l z_l:              z_l² = (η_z/η_W) Σ_k V_lk² + c
    exp     b_l = x_l e^{z_l/τ}:        z_l  = (η_z/η_W) Σ_k V_lk² / (2τ) + c
    softmax b_l ∝ x_l e^{z_l/τ}:        z_l ≈ (η_z/η_W) (Σ_k V_lk² − b̄_l ‖V‖²_F) / (2τ) + c
                                        (if b stays near its mean b̄; approximate)

Everything is batched over S independent runs: W (S, d, K), z (S, M_c).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.loop import run_steps

ATTENTIONS = ("softmax", "exp", "linear")
ACTIVATIONS = ("linear", "relu")
OBJECTIVES = ("ce", "g")  # cross-entropy, or the constant back-propagated g of the paper
HEADS = ("none", "linear")  # h are the logits, or a trained linear head maps K -> classes


def make_embedding(spec: str, d: int, num_contextual: int, seed: int = 0) -> torch.Tensor:
    """[U_C, u_q] as a (d, M_c + 1) float64 matrix, checked orthonormal.

    ``identity``: the authors' padded identity; ``random``: orthonormal columns by QR of a
    Gaussian matrix; anything else is read as a file holding the matrix.
    """
    n = num_contextual + 1
    if d < n:
        raise ConfigError(f"d={d} is smaller than the {n} tokens (M_c contextual + 1 query): "
                          f"orthonormal embeddings need d >= {n}")
    if spec == "identity":
        U = torch.eye(d, n, dtype=torch.float64)
    elif spec == "random":
        gen = torch.Generator().manual_seed(seed)
        U = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64)).Q
    else:
        U = _load_matrix(Path(spec))
    return check_embedding(U, d, num_contextual)


def _load_matrix(path: Path) -> torch.Tensor:
    if not path.is_file():
        raise ConfigError(f"embedding={path}: no such file; use identity, random, or a .npy/.pt (d, M_c+1) matrix")
    try:
        data = np.load(path) if path.suffix == ".npy" else torch.load(path, weights_only=True)
        return torch.as_tensor(data, dtype=torch.float64)
    except Exception as e:  # a corrupt or foreign file: say which and why
        raise ConfigError(f"embedding={path}: cannot read a matrix from it ({type(e).__name__}: {e})") from None


def check_embedding(U: torch.Tensor, d: int, num_contextual: int, tol: float = 1e-6) -> torch.Tensor:
    """Refuse an embedding of the wrong shape or with non-orthonormal columns (Theorem 1 needs
    U_Cᵀ U_C = I and U_Cᵀ u_q = 0, so that U_Cᵀ f = b exactly)."""
    n = num_contextual + 1
    if U.ndim != 2 or tuple(U.shape) != (d, n):
        raise ConfigError(f"embedding has shape {tuple(U.shape)}, expected (d, M_c + 1) = ({d}, {n})")
    err = float((U.T @ U - torch.eye(n, dtype=U.dtype)).abs().max())
    if not err <= tol:  # also refuses NaN
        raise ConfigError(f"embedding columns are not orthonormal (max |UᵀU - I| = {err:.3g} > {tol:g}): "
                          "orthonormalise them first, e.g. torch.linalg.qr(U).Q")
    return U


def attention(z: torch.Tensor, x: torch.Tensor, form: str, tau: float = 1.0) -> torch.Tensor:
    """b = σ(z) ∘ x / A. z: (S, M_c) query logits; x: (N, M_c) or per run (S, N, M_c) counts -> b: (S, N, M_c)."""
    if form == "linear":
        return z[:, None, :] * x
    logits = z[:, None, :] / tau
    if form == "exp":
        return x * logits.exp()
    # softmax over the tokens present: x_l e^{z_l/τ} / Σ x e^{z/τ}, shifted for stability
    w = x * (logits - logits.amax(-1, keepdim=True)).exp()
    return w / w.sum(-1, keepdim=True)


@dataclass(frozen=True)
class JomaLayer:
    """The fixed parts of the JoMA layer: embedding, attention form, nonlinearity, objective."""

    U: torch.Tensor  # (d, M_c + 1): [U_C, u_q], orthonormal
    attention: str = "softmax"
    tau: float = 1.0  # softmax / exp temperature
    activation: str = "linear"
    objective: str = "ce"
    head: str = "none"

    def __post_init__(self):
        for name, allowed in (("attention", ATTENTIONS), ("activation", ACTIVATIONS),
                              ("objective", OBJECTIVES), ("head", HEADS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r}: use one of {', '.join(allowed)}")
        if not self.tau > 0:
            raise ConfigError(f"tau={self.tau}: the attention temperature must be > 0")
        if self.objective == "g" and self.head != "none":
            raise ConfigError("objective=g back-propagates a fixed g into the K hidden nodes: use head=none")

    @property
    def U_C(self) -> torch.Tensor:
        return self.U[:, :-1]

    @property
    def num_contextual(self) -> int:
        return self.U.shape[1] - 1

    def check_shapes(self, K: int, num_classes: int, x: torch.Tensor) -> None:
        """One clear line for a layer that cannot be built from these sizes."""
        if x.ndim not in (2, 3) or x.shape[-1] != self.num_contextual:
            raise ConfigError(f"inputs have {x.shape[-1] if x.ndim else 0} token counts but the embedding has "
                              f"{self.num_contextual} contextual tokens: give x as (N, {self.num_contextual})")
        if K < 1:
            raise ConfigError(f"K={K}: the MLP needs at least one hidden node")
        if self.head == "none" and K != num_classes:
            raise ConfigError(f"K={K} hidden nodes but {num_classes} classes: with head=none the hidden nodes "
                              f"are the logits, so set K={num_classes} or use head=linear")

    def hidden(self, W: torch.Tensor, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """h = φ(Wᵀ f). W: (S, d, K); z: (S, M_c); x: (N, M_c) -> h: (S, N, K)."""
        b = attention(z, x, self.attention, self.tau)  # (S, N, M_c)
        f = b @ self.U_C.T.to(b.dtype) + self.U[:, -1].to(b.dtype)  # (S, N, d): U_C b + u_q
        pre = f @ W  # (S, N, K)
        return pre.relu() if self.activation == "relu" else pre

    def loss_per_run(self, W, z, x, y, head: torch.Tensor | None = None) -> torch.Tensor:
        """Each run's mean loss over the N samples. -> (S,)."""
        return self.loss_of_hidden(self.hidden(W, z, x), y, head)

    def loss_of_hidden(self, h: torch.Tensor, y: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
        """Each run's mean loss given the hidden nodes h (S, N, K): the objective alone (its gradient is g). -> (S,)."""
        if self.objective == "g":
            # L = -(1/N) Σ_n g_{y_n}ᵀ h_n with g = rows of I - 11ᵀ/K: ∂L/∂h is constant in time
            K = h.shape[-1]
            G = torch.eye(K, dtype=h.dtype) - 1.0 / K
            return -(G[y] * h).sum(-1).mean(-1)
        logits = h if head is None else h @ head  # (S, N, C)
        logp = logits.log_softmax(-1)
        return -logp.gather(-1, y.expand(logits.shape[0], -1)[..., None]).squeeze(-1).mean(-1)

    def loss(self, W, z, x, y, head: torch.Tensor | None = None) -> torch.Tensor:
        """Sum over runs of each run's loss, so each run's gradient is its own. -> ()."""
        return self.loss_per_run(W, z, x, y, head).sum()


# ----------------------------------------------------------------------------- training
@dataclass
class JomaHistory:
    """Recorded trajectory. steps: (T,); V: (T, S, M_c, K); z: (T, S, M_c); W_sq: (T, S) = ‖W‖²_F;
    loss: (T, S)."""

    steps: list[int]
    V: torch.Tensor
    z: torch.Tensor
    W_sq: torch.Tensor
    loss: torch.Tensor
    extra: dict = field(default_factory=dict)


def train(
    layer: JomaLayer,
    x: torch.Tensor,
    y: torch.Tensor,
    W0: torch.Tensor,
    z0: torch.Tensor,
    eta_w: float,
    eta_z: float,
    steps: int,
    head0: torch.Tensor | None = None,
    record: Sequence[int] | None = None,
    on_step: Callable[[int], None] | None = None,
    observe: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None,
) -> JomaHistory:
    """Full-batch gradient descent on W, z (and the head, if any), all S runs at once.

    x: (N, M_c) inputs, shared or per run (S, N, M_c); y: (N,) labels; W0: (S, d, K); z0: (S, M_c);
    head0: (S, K, C) or None.
    ``record``: steps at which V, z are stored (default: every step, 0..steps).
    ``observe(t, W, z)``: called before update t + 1 with the current parameters (detached; read, do not keep).
    """
    num_classes = int(y.max()) + 1 if head0 is None else head0.shape[-1]
    layer.check_shapes(W0.shape[-1], num_classes, x)
    if head0 is None and layer.head == "linear":
        raise ConfigError("head=linear needs initial head weights (S, K, C)")
    W = W0.clone().requires_grad_(True)
    z = z0.clone().requires_grad_(True)
    params = [W, z] + ([head0.clone().requires_grad_(True)] if layer.head == "linear" else [])
    lrs = [eta_w, eta_z] + [eta_w] * (len(params) - 2)
    head = params[2] if len(params) > 2 else None
    wanted = range(steps + 1) if record is None else [s for s in record if 0 <= s <= steps]
    U_C = layer.U_C.to(W0.dtype)
    hist_steps, Vs, zs, Wsq, losses = [], [], [], [], []

    def keep(t: int) -> None:
        with torch.no_grad():
            hist_steps.append(t)
            Vs.append(U_C.T @ W)  # (S, M_c, K)
            zs.append(z.clone())
            Wsq.append(W.pow(2).sum((-2, -1)))
            losses.append(layer.loss_per_run(W, z, x, y, head))

    def update(t: int) -> None:
        if observe is not None:
            observe(t, W.detach(), z.detach())
        grads = torch.autograd.grad(layer.loss(W, z, x, y, head), params)
        with torch.no_grad():
            for p, g, lr in zip(params, grads, lrs):
                p.sub_(lr * g)

    run_steps(steps, update, keep, wanted, on_step)
    return JomaHistory(hist_steps, torch.stack(Vs), torch.stack(zs), torch.stack(Wsq), torch.stack(losses))
