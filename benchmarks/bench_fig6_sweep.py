"""Time the full Fig. 6 sweep (4 x 4 x 4 configs x 10 seeds = 640 runs of 100 steps).

Side by side in one process:

* **attnlab**: ``train_sweep`` — all configs and seeds of one num_last as one batched tensor
  program, data drawn as multinomial count vectors (the model has no positional encoding).
* **naive**: the way the authors' script runs — one run at a time, a Python loop that builds
  each sequence token by token (``random.choice`` of a class, ``torch.multinomial`` per
  sample), one-hot sequences, ``nn.Linear`` Y and Z, two ``torch.optim.SGD``.

Usage::

    python benchmarks/bench_fig6_sweep.py                  # full: 640 naive runs too (minutes)
    python benchmarks/bench_fig6_sweep.py --naive-runs 64  # naive on an even subset, extrapolated

Prints both wall times, the speed-up, the per-run medians, and how the naive runs' final
entropies sit within the spread of attnlab's seeds in the same cell (the two are equal in
distribution, not bitwise: different random streams).
"""
from __future__ import annotations

import json
import random
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.theory.scansnap.data import SeqClassConfig, SeqClassDistribution
from attnlab.theory.scansnap.population import distinct_entropy
from attnlab.theory.scansnap.train import SGDConfig, lr_grid, train_sweep

from host import add_out, machine, number, parser, recorded  # benchmarks/host.py

NUM_LAST = (1, 3, 5, 10)
ETA_Z = (0.5, 1.0, 2.0, 3.0)
RATIO = (1.0, 2.0, 5.0, 10.0)
SEEDS = tuple(range(1, 11))
STEPS, BATCH, T = 100, 128, 128


def fast_sweep() -> tuple[float, dict]:
    eta_z, eta_y = lr_grid(ETA_Z, RATIO)
    cells = {}
    t0 = time.perf_counter()
    for nl in NUM_LAST:
        dist = SeqClassDistribution(SeqClassConfig(num_last=nl, T=T))
        res = train_sweep(dist, eta_z, eta_y, SEEDS, SGDConfig(steps=STEPS, batch_size=BATCH))
        ent = distinct_entropy(dist, res.Z.double()).mean(-1)  # (C, S)
        for c in range(len(eta_z)):
            cells[(nl, float(eta_z[c]), float(eta_y[c] / eta_z[c]))] = ent[c].tolist()
    return time.perf_counter() - t0, cells


def naive_run(dist: SeqClassDistribution, eta_z: float, ratio: float, seed: int) -> float:
    """One run, the authors' way. Returns the final distinct-token entropy (mean over classes)."""
    random.seed(seed)
    torch.manual_seed(seed)
    M = dist.M
    Y = nn.Linear(M, M, bias=False)  # K1: logits = Y u
    Z = nn.Linear(M, M, bias=False)  # K2: z_{ml} = Z.weight[m, l]
    opt_y = torch.optim.SGD(Y.parameters(), lr=eta_z * ratio, momentum=0.9)
    opt_z = torch.optim.SGD(Z.parameters(), lr=eta_z, momentum=0.9)
    facts = [(dist.support[n], dist.support_P[n].float(), int(dist.query[n]), int(dist.label[n]))
             for n in range(dist.K)]
    for _ in range(STEPS):
        x = torch.empty(BATCH, T, dtype=torch.long)
        label = torch.empty(BATCH, dtype=torch.long)
        for i in range(BATCH):
            tokens, probs, last, nxt = random.choice(facts)
            x[i, :-1] = tokens[torch.multinomial(probs, T - 1, replacement=True)]
            x[i, -1] = last
            label[i] = nxt
        X = F.one_hot(x, M).float()  # (B, T, M)
        X_key = X[:, :-1]
        logit = torch.bmm(Z(X_key), X[:, -1].unsqueeze(2)).squeeze(2)  # (B, T-1)
        u = torch.bmm(torch.softmax(logit, 1).unsqueeze(1), X_key).squeeze(1)  # (B, M)
        loss = F.cross_entropy(Y(u / u.norm(dim=1, keepdim=True)), label)
        opt_y.zero_grad()
        opt_z.zero_grad()
        loss.backward()
        opt_y.step()
        opt_z.step()
    return float(distinct_entropy(dist, Z.weight.detach().double()).mean())


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--naive-runs", type=number(int, "[1, 640]"), default=640,
                    help="naive runs to time (even subset; default all 640)")
    add_out(ap)
    args = ap.parse_args(argv)

    with recorded(args.out, figures := {}):
        figures.update(run(args))


def run(args) -> dict:
    fast_s, fast_cells = fast_sweep()
    all_runs = [(nl, ez, r, s) for nl in NUM_LAST for ez in ETA_Z for r in RATIO for s in SEEDS]
    stride = max(1, len(all_runs) // max(1, args.naive_runs))
    chosen = all_runs[::stride][: args.naive_runs]
    dists = {nl: SeqClassDistribution(SeqClassConfig(num_last=nl, T=T)) for nl in NUM_LAST}
    per_run, naive_ent = [], {}
    t0 = time.perf_counter()
    for nl, ez, r, s in chosen:
        t1 = time.perf_counter()
        naive_ent.setdefault((nl, ez, r), []).append(naive_run(dists[nl], ez, r, s))
        per_run.append(time.perf_counter() - t1)
    naive_measured = time.perf_counter() - t0
    naive_full = naive_measured * len(all_runs) / len(chosen)

    # agreement: each naive run against the spread of attnlab's 10 seeds in the same cell
    zs = [abs(e - statistics.mean(fast_cells[k])) / statistics.stdev(fast_cells[k])
          for k, v in naive_ent.items() for e in v]
    out = {
        "machine": machine(),
        "runs": len(all_runs),
        "attnlab_sweep_s": round(fast_s, 2),
        "attnlab_per_run_amortised_s": round(fast_s / len(all_runs), 4),
        "naive_runs_timed": len(chosen),
        "naive_measured_s": round(naive_measured, 2),
        "naive_full_sweep_s": round(naive_full, 1),
        "naive_per_run_median_s": round(statistics.median(per_run), 4),
        "speedup": round(naive_full / fast_s, 1),
        "naive_vs_attnlab_z_median": round(statistics.median(zs), 2),
        "naive_within_3_std_fraction": round(sum(z <= 3 for z in zs) / len(zs), 3),
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
