"""Power-law fits of rank-frequency data: value ≈ C · rank^(-a), least squares on log-log.

H2O ("Heavy-Hitter Oracle", Zhang et al. 2023) observes that the attention a token accumulates over a
prompt follows a power law in its rank. :func:`power_law_fit` sorts the positive values descending
(rank 1 = largest) and fits log value = log C - a · log rank over the *head* of the distribution:
ranks 1 .. ceil(head · N) of the N positive values (at least ``min_ranks``). The head is where a
heavy tail shows; the far tail of finite data bends down (finite-size cutoff) and would dominate a
fit over every rank, since log-spaced ranks are mostly tail.

Worked example: values 100 · rank^-1.5 for ranks 1..1000 give exponent 1.5, intercept log 100 = 4.605,
R² = 1; equal values give exponent 0 (R² is 0 by convention when every value is the same).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class PowerLawFit:
    exponent: float  # a in value ≈ C · rank^(-a): larger is heavier-headed
    intercept: float  # log C (natural log)
    r2: float  # coefficient of determination of the log-log line
    ranks: int  # ranks 1 .. ranks were fitted
    n: int  # positive values in the data

    def to_json(self) -> dict:
        return asdict(self)


def rank_frequency(values) -> torch.Tensor:
    """The positive entries of ``values`` (any shape) sorted descending, float64: index r-1 holds rank r."""
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    return v[v > 0].sort(descending=True).values


def power_law_fit(values, head: float = 0.1, min_ranks: int = 3) -> PowerLawFit:
    """Fit value ≈ C · rank^(-a) over ranks 1 .. max(min_ranks, ceil(head · N)) of the N positive values;
    ValueError when fewer than ``min_ranks`` values are positive or ``head`` is outside (0, 1]."""
    if not 0 < head <= 1:
        raise ValueError(f"head={head}: the share of ranks to fit must be in (0, 1]")
    v = rank_frequency(values)
    n = v.numel()
    if n < min_ranks:
        raise ValueError(f"a power-law fit needs at least {min_ranks} positive values; got {n}")
    k = min(n, max(min_ranks, math.ceil(head * n)))
    x = torch.arange(1, k + 1, dtype=torch.float64).log()  # log rank
    y = v[:k].log()  # log value
    xc, yc = x - x.mean(), y - y.mean()
    slope = (xc * yc).sum() / (xc * xc).sum()
    ss_tot = (yc * yc).sum()
    ss_res = ((yc - slope * xc) ** 2).sum()
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else torch.tensor(0.0)  # flat data: the line explains nothing
    return PowerLawFit(exponent=float(-slope), intercept=float(y.mean() - slope * x.mean()), r2=float(r2),
                       ranks=k, n=n)
