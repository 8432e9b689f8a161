"""SGD on the Y/Z model, many runs at once.

A sweep is C configs (η_Z, η_Y pairs) x S seeds. Every run is independent, so their
parameters are stacked into Y, Z of shape (C, S, M, M) and one step of all C·S runs is one
batched tensor program; the loss is the sum of the runs' losses, whose gradient w.r.t.
each run's parameters is that run's own gradient.

As in the authors' sweep, a seed fixes both the initial weights and the data stream, so
every config sees the same init and the same mini-batches for a given seed (common random
numbers: differences between configs are not sampling noise). Each seed has its own
generator, so a seed's run does not depend on which other seeds are in the sweep.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from attnlab.core.errors import ConfigError
from attnlab.theory.loop import run_steps
from attnlab.theory.scansnap.data import SeqClassDistribution
from attnlab.theory.scansnap.model import INITS, cross_entropy, init_yz, yz_logits


@dataclass(frozen=True)
class SGDConfig:
    """Optimiser and model options of one training run (the authors' defaults)."""

    steps: int = 100
    batch_size: int = 128
    momentum: float = 0.9
    init: str = "default"  # "default" = nn.Linear's U(±1/√M); "zero"
    normalize: bool = True
    residual: bool = False

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ConfigError(f"steps={self.steps} is negative: use 0 or more")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={self.batch_size}: use at least 1")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"momentum={self.momentum}: use a value in [0, 1)")
        if self.init not in INITS:
            raise ConfigError(f"init={self.init!r}: use one of {', '.join(INITS)}")


def lr_grid(eta_z: Sequence[float], ratio: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (η_Z, η_Y/η_Z) pair as the (C,) tensors ``train_sweep`` takes, η_Z-major:
    config c = i·len(ratio) + j has η_Z = eta_z[i] and η_Y = eta_z[i]·ratio[j]."""
    ez = torch.tensor(eta_z, dtype=torch.float32).repeat_interleave(len(ratio))
    return ez, ez * torch.tensor(ratio, dtype=torch.float32).repeat(len(eta_z))


def check_learning_rates(eta_z: torch.Tensor, eta_y: torch.Tensor) -> None:
    if eta_z.shape != eta_y.shape or eta_z.ndim != 1:
        raise ConfigError("eta_z and eta_y must be 1-d and of equal length (one pair per config)")
    if not (torch.isfinite(eta_z).all() and torch.isfinite(eta_y).all()):
        raise ConfigError("a learning rate is NaN or infinite: η_Z and η_Y must be finite numbers >= 0")
    if (eta_z < 0).any() or (eta_y < 0).any():
        raise ConfigError("a learning rate is negative: η_Z and η_Y (= η_Z · ratio) must be >= 0")


@dataclass
class SweepResult:
    """Final weights and history of a sweep. Y, Z: (C, S, M, M); loss: (steps, C, S)."""

    Y: torch.Tensor
    Z: torch.Tensor
    loss: torch.Tensor
    snapshots: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # step -> (Y, Z)


def train_sweep(
    dist: SeqClassDistribution,
    eta_z: torch.Tensor,
    eta_y: torch.Tensor,
    seeds: Sequence[int],
    cfg: SGDConfig = SGDConfig(),
    device: str | torch.device = "cpu",
    snapshot_steps: Sequence[int] = (),
    on_step: Callable[[int], None] | None = None,
) -> SweepResult:
    """Train C x S runs of the Y/Z model with SGD (separate η_Z for Z, η_Y for Y, momentum).

    eta_z, eta_y: (C,) learning rates. ``snapshot_steps``: steps k at which (Y, Z) after k
    updates is kept (0 = init). ``on_step(k)`` is called after the k-th step (progress bars).
    """
    eta_z = torch.as_tensor(eta_z, dtype=torch.float32)
    eta_y = torch.as_tensor(eta_y, dtype=torch.float32)
    check_learning_rates(eta_z, eta_y)
    if len(seeds) == 0:
        raise ConfigError("no seeds: pass at least one")
    C, S, M, B = len(eta_z), len(seeds), dist.M, cfg.batch_size
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]

    inits = [init_yz(M, cfg.init, g) for g in gens]
    Y = torch.stack([y for y, _ in inits]).expand(C, S, M, M).contiguous().to(device)  # (C, S, M, M)
    Z = torch.stack([z for _, z in inits]).expand(C, S, M, M).contiguous().to(device)
    Y.requires_grad_(True)
    Z.requires_grad_(True)
    lr_y = eta_y.to(device)[:, None, None, None]  # (C, 1, 1, 1)
    lr_z = eta_z.to(device)[:, None, None, None]
    buf_y = torch.zeros_like(Y)
    buf_z = torch.zeros_like(Z)
    losses = torch.empty(cfg.steps, C, S)
    snapshots: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def snapshot(step: int) -> None:
        snapshots[step] = (Y.detach().cpu().clone(), Z.detach().cpu().clone())

    def update(step: int) -> None:
        batches = [dist.sample_counts(B, g) for g in gens]
        counts = torch.stack([b[0] for b in batches]).to(device)  # (S, B, M)
        query = torch.stack([b[1] for b in batches]).to(device)  # (S, B)
        label = torch.stack([b[2] for b in batches]).to(device)  # (S, B)
        loss = cross_entropy(yz_logits(Y, Z, counts, query, cfg.normalize, cfg.residual), label)  # (C, S)
        g_y, g_z = torch.autograd.grad(loss.sum(), (Y, Z))
        with torch.no_grad():
            # torch.optim.SGD (dampening 0, no weight decay): buf <- μ buf + g; θ <- θ - η buf
            buf_y.mul_(cfg.momentum).add_(g_y)
            buf_z.mul_(cfg.momentum).add_(g_z)
            Y.sub_(lr_y * buf_y)
            Z.sub_(lr_z * buf_z)
        losses[step] = loss.detach().cpu()

    run_steps(cfg.steps, update, snapshot, (int(k) for k in snapshot_steps), on_step)
    return SweepResult(Y.detach().cpu(), Z.detach().cpu(), losses, snapshots)
