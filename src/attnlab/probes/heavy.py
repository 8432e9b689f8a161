"""Heavy hitters (H2O, Zhang et al. 2023): the attention each key accumulates over a text, its power law,
how much of each row the top keys hold, and whether the heavy hitters are the sinks or the recent keys.

Per layer the probe adds up, chunk by chunk, the column sums of the attention pattern
(``core.metrics.received_attention``, the same function the KV cache's H2O scores use), kept per KV
head: a key's *accumulated attention* is what H2O evicts by. That is (L, H_kv, T) floats, never a map.
At the end, per layer and pooled over layers (the sum over layers):

- the rank-frequency of accumulated attention and a power-law fit over its head (``core.fit``): ranks
  1 .. ceil(fit_head · T); the same for the attention per query that could see the key (accumulated / (T - j),
  which removes the advantage early keys have from being seen by more queries);
- the top-share: for a row that sees n keys, the share of its attention held by its ceil(share · n)
  largest entries, averaged over every row and head of the layer (H2O: attention is > 95 % sparse), or
  over every ``row_stride``-th query row: its top-k costs as much as the attention it reads;
- the heavy-hitter set (the ``heavy`` keys of largest accumulated attention) and how many of them are
  sinks (the first ``n_sink`` positions) or recent (the last ``recent`` positions).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.core.fit import power_law_fit, rank_frequency
from attnlab.core.metrics import follow, received_attention
from attnlab.experiments.claims import check, finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register

EPS = 1e-9  # ceil(share · n) without float noise: 0.1 · 30 = 3.0000000000000004 must keep 3 keys


def top_counts(n_visible: torch.Tensor, share: float) -> torch.Tensor:
    """How many keys the top ``share`` of a row that sees n keys holds: ceil(share · n), at least 1."""
    return (n_visible.double() * share - EPS).ceil().long().clamp(min=1)


def log_ranks(n: int, points: int = 48) -> list[int]:
    """About ``points`` ranks from 1 to n, evenly spaced on a log axis (a rank-frequency curve's samples)."""
    r = torch.logspace(0, math.log10(max(n, 1)), points, dtype=torch.float64).round().long().unique()
    return [int(x) for x in r if 1 <= x <= n]


@register
class HeavyHitterProbe(Probe):
    name = "heavy-hitters"
    needs = ("blocks.*.attn.pattern",)
    summary = ("H2O's heavy hitters: accumulated attention per key, its power law, the top keys' share of each "
               "row, overlap with sinks and recent keys")

    # n_sink, recent: the heavy hitters counted among the first / last positions (none: no count to report)
    bounds = {"shares": "(0, 1]", "n_sink": ">= 1", "recent": ">= 1", "heavy": ">= 1", "fit_head": "(0, 1]",
              "r2_min": "[0, 1]", "top_share": "(0, 1]", "top_mass": "[0, 1]", "most": "[0, 1]", "row_stride": ">= 1"}

    def __init__(self, shares: tuple[float, ...] = (0.05, 0.1, 0.2), n_sink: int = 4, recent: int = 64,
                 heavy: int = 64, fit_head: float = 0.1, r2_min: float = 0.9, top_share: float = 0.2,
                 top_mass: float = 0.5, most: float = 0.5, row_stride: int = 1):
        check_bounds(self, locals())
        self.shares = tuple(float(s) for s in shares)
        if not self.shares:
            raise UsageError("heavy-hitters: shares is empty: give the shares of keys, e.g. shares=0.05,0.1,0.2")
        if float(top_share) not in self.shares:
            raise UsageError(f"heavy-hitters: top_share={top_share} must be one of shares={self.shares}")
        self.row_stride = int(row_stride)  # the top-share reads query rows at positions 0, n, 2n, ...: its top-k
        # costs O(T²) like attention itself, the accumulation O(T) per row (a 16k text: row_stride=8 saves 7/8)
        self.n_sink, self.recent, self.heavy, self.fit_head = int(n_sink), int(recent), int(heavy), float(fit_head)
        # the claims' thresholds, fixed here before any run: H2O's power law, and "the top 20% hold most"
        self.r2_min, self.top_share, self.top_mass = float(r2_min), float(top_share), float(top_mass)
        self.most = float(most)  # "in most layers": at least this share of the layers

    def attach(self, model: nn.Module, ids: torch.Tensor) -> None:
        d = arch.dims(model)
        self.n_kv, self.T = d.n_kv_heads, ids.numel()
        need = max(self.heavy, self.n_sink, self.recent, 3)  # a fit needs 3 ranks
        if self.T < need:
            raise UsageError(f"heavy-hitters: the text has {self.T} tokens; it needs at least {need} "
                             f"(heavy={self.heavy}, recent={self.recent}, n_sink={self.n_sink})")
        self.acc = torch.zeros(d.n_layers, d.n_kv_heads, self.T, dtype=torch.float64)  # (L, Hkv, T)
        self.mass = torch.zeros(d.n_layers, len(self.shares), dtype=torch.float64)  # top-shares summed over rows
        self.rows = torch.zeros(d.n_layers, dtype=torch.long)  # rows (head, query) seen per layer

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        i = layer_of(name)
        p = t[0].float()  # (H, q, S), S = start + q
        h, q, s = p.shape
        self.acc, self.mass, self.rows = follow(p, self.acc, self.mass, self.rows)
        # query head h reads KV head h // g (transformers' repeat_kv): a KV head's g query heads are adjacent
        self.acc[i, :, :s] += received_attention(p.reshape(self.n_kv, (h // self.n_kv) * q, s))  # (Hkv, S)
        pos = torch.arange(start, start + q, device=p.device)  # (q,) absolute positions of the chunk's queries
        rows = (pos % self.row_stride == 0).nonzero().squeeze(1)  # the query rows the top-share reads
        if rows.numel():
            self.mass[i] += self._top_mass(p[:, rows], pos[rows] + 1)
            self.rows[i] += h * rows.numel()

    def _top_mass(self, p: torch.Tensor, n_visible: torch.Tensor) -> torch.Tensor:
        """(n_shares,) the top-shares of rows p (H, r, S), summed over heads and rows; ``n_visible`` (r,):
        how many keys each row sees (causal: its position + 1)."""
        last = torch.stack([top_counts(n_visible, s) - 1 for s in self.shares], -1)  # (q, n_shares)
        k = int(last.max()) + 1  # the most keys any row keeps: the last row's, at the largest share
        out = p.new_zeros(len(self.shares), dtype=torch.float64)
        for head in p:  # (q, S): one head at a time, not a copy of the whole pattern
            # top-k, not a full sort: 3.5x faster at k = 20% of S, the same sums
            top = head.topk(k, dim=-1).values.cumsum(-1)  # (q, k) mass of each row's top r+1 keys, r < k
            out += top.gather(-1, last).sum(0).double()
        return out

    def result(self) -> dict:
        self.acc, self.mass, self.rows = (x.cpu() for x in (self.acc, self.mass, self.rows))
        total = self.acc.sum(1)  # (L, T): accumulated attention per key, all heads
        seen_by = torch.arange(self.T, 0, -1, dtype=torch.float64)  # (T,) queries that see key j: T - j
        fits = [power_law_fit(row, self.fit_head) for row in total]
        k = self.heavy
        top = total.topk(k, dim=-1).indices  # (L, k) the heavy-hitter set of each layer
        ranks = log_ranks(self.T)
        return {
            "tokens": self.T, "fit_head": self.fit_head, "row_stride": self.row_stride,
            "power_law": _fit_table(fits),
            "pooled": power_law_fit(total.sum(0), self.fit_head).to_json(),
            "power_law_per_kv_head": _fit_table([[power_law_fit(r, self.fit_head) for r in layer]
                                                 for layer in self.acc]),
            "power_law_per_query": _fit_table([power_law_fit(row / seen_by, self.fit_head) for row in total]),
            "pooled_per_query": power_law_fit(total.sum(0) / seen_by, self.fit_head).to_json(),
            "top_share": {f"{s:g}": (self.mass[:, j] / self.rows).tolist() for j, s in enumerate(self.shares)},
            "heavy": {
                "k": k, "n_sink": self.n_sink, "recent": self.recent,
                "in_sinks": (top < self.n_sink).sum(-1).tolist(),  # heavy hitters that are sinks, per layer
                "in_recent": (top >= self.T - self.recent).sum(-1).tolist(),
                "top_positions": top[:, :10].tolist(),  # the 10 heaviest keys of each layer
            },
            "rank_frequency": {"ranks": ranks, "values": [_at_ranks(row, ranks) for row in total],
                               "pooled": _at_ranks(total.sum(0), ranks)},
        }

    def claims(self, metrics: dict) -> list:
        r2 = metrics["power_law"]["r2"]
        top = metrics["top_share"][f"{self.top_share:g}"]
        n = len(r2)
        head = f"over the top {self.fit_head:.0%} of ranks"
        heavy = metrics["heavy"]
        return [
            check(f"accumulated attention, pooled over layers, follows a power law: R² >= {self.r2_min} {head} (H2O)",
                  metrics["pooled"]["r2"], self.r2_min, 0.0, "at_least"),
            check(f"share of layers whose accumulated attention fits a power law with R² >= {self.r2_min} {head} "
                  f"(at least {self.most:.0%})", sum(x >= self.r2_min for x in r2) / n, self.most, 0.0, "at_least"),
            check(f"share of layers where the top {self.top_share:.0%} of keys hold > {self.top_mass:.0%} of a row's "
                  f"attention mass, mean over rows (at least {self.most:.0%})",
                  sum(x > self.top_mass for x in top) / n, self.most, 0.0, "at_least"),
            finding("power-law exponent of accumulated attention, pooled over layers", metrics["pooled"]["exponent"]),
            finding("power-law R² of attention per query that sees the key, pooled (age removed)",
                    metrics["pooled_per_query"]["r2"]),
            *[finding(f"mean over layers of the top {float(s):.0%} of keys' share of a row's attention", sum(v) / n)
              for s, v in metrics["top_share"].items()],
            finding(f"mean over layers: of the {heavy['k']} heavy hitters, how many are among the first "
                    f"{heavy['n_sink']} positions", sum(heavy["in_sinks"]) / n),
            finding(f"mean over layers: of the {heavy['k']} heavy hitters, how many are among the last "
                    f"{heavy['recent']} positions", sum(heavy["in_recent"]) / n),
        ]

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        return {rank_frequency_figure(ctx, metrics): "Accumulated attention per key against its rank (log-log) for a "
                "few layers and pooled over layers, with the power-law fit over the head (H2O's heavy hitters).",
                top_share_figure(ctx, metrics, self.r2_min, self.top_mass): "Per layer: the share of a row's attention "
                "held by its top keys (mean over rows and heads), and the power-law fit's R² over the head."}


def _at_ranks(values: torch.Tensor, ranks: list[int]) -> list[float]:
    """The rank-frequency curve of ``values`` at ``ranks`` (NaN past its last positive value)."""
    rf = rank_frequency(values)
    return [float(rf[r - 1]) if r <= rf.numel() else math.nan for r in ranks]


def _fit_table(fits) -> dict:
    """A list (or list of lists) of fits -> {"exponent": [...], "intercept": [...], "r2": [...], "ranks": ...}."""
    def pick(f, key):
        return [pick(x, key) for x in f] if isinstance(f, list) else getattr(f, key)

    return {key: pick(fits, key) for key in ("exponent", "intercept", "r2", "ranks")}


def rank_frequency_figure(ctx, metrics: dict, name: str = "heavy_rank_frequency.png") -> str:
    """Log-log accumulated attention against rank for the first, second, middle and last layers, each with
    its fitted line over the fitted ranks."""
    from attnlab.core.plotting import plt

    rf, fits = metrics["rank_frequency"], metrics["power_law"]
    n = len(rf["values"])
    fig, ax = plt.subplots(figsize=(5.2, 3.8), layout="constrained")
    for c, i in enumerate(sorted({0, min(1, n - 1), n // 2, n - 1})):
        ax.plot(rf["ranks"], rf["values"][i], "o", ms=2.5, color=f"C{c}",
                label=f"layer {i}: a={fits['exponent'][i]:.2f}, R²={fits['r2'][i]:.2f}")
        r = torch.arange(1, fits["ranks"][i] + 1, dtype=torch.float64)
        ax.plot(r, math.exp(fits["intercept"][i]) * r ** -fits["exponent"][i], "-", color=f"C{c}", lw=1)
    pooled = metrics["pooled"]
    ax.plot(rf["ranks"], rf["pooled"], "k.", ms=3, label=f"pooled: a={pooled['exponent']:.2f}, R²={pooled['r2']:.2f}")
    r = torch.arange(1, pooled["ranks"] + 1, dtype=torch.float64)
    ax.plot(r, math.exp(pooled["intercept"]) * r ** -pooled["exponent"], "k-", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="rank of key", ylabel="accumulated attention (all heads)",
           title=f"rank-frequency over {metrics['tokens']} tokens; fit over top {metrics['fit_head']:.0%}")
    ax.legend(fontsize=7)
    return ctx.savefig(fig, name)


def top_share_figure(ctx, metrics: dict, r2_min: float, top_mass: float, name: str = "heavy_top_share.png") -> str:
    """Left: per layer, the share of a row's attention its top keys hold; right: the power-law R² per layer."""
    from attnlab.core.plotting import plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    for share, values in metrics["top_share"].items():
        axes[0].plot(range(len(values)), values, "o-", ms=3, label=f"top {float(share):.0%} of keys")
    axes[0].axhline(top_mass, color="grey", ls="--", lw=0.8, label=f"{top_mass:.0%} (claim)")
    axes[0].set(xlabel="layer", ylabel="share of the row's attention", ylim=(0, 1.02),
                title="attention mass on the top keys (mean over rows)")
    axes[0].legend(fontsize=7)
    r2 = metrics["power_law"]["r2"]
    axes[1].plot(range(len(r2)), r2, "o-", ms=3, label="accumulated")
    axes[1].plot(range(len(r2)), metrics["power_law_per_query"]["r2"], "s:", ms=3, label="per query that sees it")
    axes[1].axhline(r2_min, color="grey", ls="--", lw=0.8, label=f"R² = {r2_min} (claim)")
    axes[1].set(xlabel="layer", ylabel="R² (log-log)", title="power-law fit over the head, per layer")
    axes[1].legend(fontsize=7)
    return ctx.savefig(fig, name)
