"""What the Scan&Snap experiments measure on SGD runs: Fig. 4's token fates, Fig. 6's entropy grid,
and SGD against the population ODE (the flow's own checks are in :mod:`.theorems`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import torch

from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.population import attention_c, distinct_entropy, integrate_flow
from attnlab.theory.scansnap.train import SGDConfig, lr_grid, train_sweep


@dataclass
class TokenFates:
    """One SGD run of Fig. 4, class n. shown: (C + D,) token ids, commons then the class's distinct tokens;
    c_rows: (steps, C + D) attention c_{l|n} at the recorded steps; z_shown: (C + D,) final z_ml;
    z_common, z_distinct: final z_ml of each kind; rho: Spearman rank correlation of z_ml with P(l|m, n)
    over distinct tokens; mass_gap: attention mass on distinct minus on common tokens at the end;
    lagging: distinct tokens ending with z_ml <= 0 as (token, z_ml, expected count per sequence)."""

    shown: torch.Tensor
    c_rows: torch.Tensor
    z_shown: torch.Tensor
    z_common: torch.Tensor
    z_distinct: torch.Tensor
    rho: float
    mass_gap: float
    lagging: list[tuple[int, float, float]]


def token_fates(dist: SeqClassDistribution, snapshots: dict, Z: torch.Tensor, steps: Sequence[int],
                n: int = 0) -> TokenFates:
    """Theorem 2 on a finite-T SGD run: Z (M, M) final; snapshots: step -> (Y, Z) of shape (1, 1, M, M)."""
    from scipy.stats import spearmanr

    m, D, Cm = dist.query[n], dist.distinct[n], dist.common
    shown = torch.cat([Cm, D])  # commons then class-n distincts, as in the paper
    c_rows = torch.stack([attention_c(dist, snapshots[s][1][0, 0].double())[n, shown] for s in steps])
    z_common, z_distinct = Z[m, Cm], Z[m, D]
    rho = spearmanr(dist.P[n, D].numpy(), z_distinct.numpy()).statistic
    c_final = attention_c(dist, Z.double())[n]
    lagging = [(int(l), float(z), float((dist.T - 1) * dist.P[n, l])) for l, z in zip(D, z_distinct) if z <= 0]
    return TokenFates(shown, c_rows, Z[m, shown], z_common, z_distinct, rho,
                      float(c_final[D].sum() - c_final[Cm].sum()), lagging)


def entropy_grid(data: SeqClassConfig, num_last: Sequence[int], eta_z: Sequence[float], ratio: Sequence[float],
                 seeds: int, sgd: SGDConfig, device: str = "cpu",
                 on_step: Callable[[int], None] | None = None) -> tuple[dict, dict, dict]:
    """Fig. 6: the average entropy of c_n on distinct tokens after training, for every num_last and every
    (η_Z, η_Y/η_Z) pair, over seeds 1..seeds (each num_last one batched sweep).

    -> (mean, std) per num_last as (len(eta_z), len(ratio)) arrays, and the entropy of the
    distinct-token prior alone (z = 0) per num_last.
    """
    seed_list = list(range(1, seeds + 1))
    lr_z, lr_y = lr_grid(eta_z, ratio)  # (C,) each, η_Z-major
    table, prior = {}, {}  # num_last -> (n_eta_z, n_ratio, seeds) entropies
    for nl in num_last:
        dist = SeqClassDistribution(replace(data, num_last=nl))
        res = train_sweep(dist, lr_z, lr_y, seed_list, sgd, device, on_step=on_step)
        table[nl] = distinct_entropy(dist, res.Z.double()).mean(-1).view(len(eta_z), len(ratio), -1)
        prior[nl] = float(distinct_entropy(dist, torch.zeros(dist.M, dist.M, dtype=torch.float64)).mean())
    mean = {nl: e.mean(-1).numpy() for nl, e in table.items()}  # (n_eta_z, n_ratio)
    std = {nl: (e.std(-1, correction=1) if seeds > 1 else torch.zeros_like(e[..., 0])).numpy()
           for nl, e in table.items()}
    return mean, std, prior


def sgd_vs_ode(data: SeqClassConfig, T_values: Sequence[int], seeds: int, eta_z: float, eta_y: float, dt: float,
               t_end: float, batch_size: int, device: str = "cpu",
               on_run: Callable[[], None] | None = None) -> dict:
    """Population ODE ≡ large-batch small-step SGD: SGD at lr η·dt (no momentum; one step is Δt = dt)
    from each seed's default init, against the flow from the same init.

    -> {"t": 40 report times, "curve": {T: mean over seeds of ‖Z_sgd(t) − Z_ode(t)‖ / ‖Z_ode(t) − Z(0)‖},
    "final_error": {T: the last of those}}.
    """
    steps = int(round(t_end / dt))
    marks = np.unique(np.linspace(0, steps, 41).astype(int))[1:]
    t = marks * dt
    curves, final = {}, {}
    for T in T_values:
        d = SeqClassDistribution(replace(data, T=T))
        # all seeds in one sweep: each seed keeps its own generator, so its run is the one it would be alone
        res = train_sweep(d, torch.tensor([eta_z * dt]), torch.tensor([eta_y * dt]), list(range(1, seeds + 1)),
                          SGDConfig(steps=steps, batch_size=batch_size, momentum=0.0), device,
                          snapshot_steps=[0, *marks])
        errs = []
        for s in range(seeds):
            Y0, Z0 = res.snapshots[0][0][0, s], res.snapshots[0][1][0, s].double()  # (M, M) each
            sol = integrate_flow(d, Y0, Z0, eta_y, eta_z, t)
            errs.append([float((res.snapshots[k][1][0, s].double() - sol.Z[i]).norm() / (sol.Z[i] - Z0).norm())
                         for i, k in enumerate(marks)])
            if on_run is not None:
                on_run()
        curves[T] = np.mean(errs, 0).tolist()
        final[T] = curves[T][-1]
    return {"t": t.tolist(), "curve": curves, "final_error": final}
