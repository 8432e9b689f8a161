"""SGD against the population ODE: the seeds trained in one sweep give each seed's own run, exactly."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.measure import sgd_vs_ode
from attnlab.theory.scansnap.population import integrate_flow
from attnlab.theory.scansnap.train import SGDConfig, train_sweep

DATA = SeqClassConfig(num_common=3, num_distinct_per_next=4)
ETA_Z, ETA_Y, DT, T_END, BATCH = 1.0, 2.0, 0.1, 2.0, 64


def _one_seed(T: int, seed: int, marks: np.ndarray) -> list[float]:
    """The relative error curve of one seed, trained alone."""
    d = SeqClassDistribution(replace(DATA, T=T))
    res = train_sweep(d, torch.tensor([ETA_Z * DT]), torch.tensor([ETA_Y * DT]), [seed],
                      SGDConfig(steps=len(marks), batch_size=BATCH, momentum=0.0), snapshot_steps=[0, *marks])
    Z0 = res.snapshots[0][1][0, 0].double()
    sol = integrate_flow(d, res.snapshots[0][0][0, 0], Z0, ETA_Y, ETA_Z, marks * DT)
    return [float((res.snapshots[k][1][0, 0].double() - sol.Z[i]).norm() / (sol.Z[i] - Z0).norm())
            for i, k in enumerate(marks)]


@pytest.mark.slow
def test_sgd_vs_ode_batches_the_seeds_without_changing_a_run():
    runs = []
    out = sgd_vs_ode(DATA, (16, 32), 2, ETA_Z, ETA_Y, DT, T_END, BATCH, on_run=lambda: runs.append(1))
    marks = np.arange(1, round(T_END / DT) + 1)  # 20 steps: every step is a report time
    assert out["t"] == (marks * DT).tolist() and len(runs) == 4  # progress: one tick per (T, seed)
    for T in (16, 32):
        alone = np.mean([_one_seed(T, seed, marks) for seed in (1, 2)], 0).tolist()
        assert out["curve"][T] == alone and out["final_error"][T] == alone[-1]
