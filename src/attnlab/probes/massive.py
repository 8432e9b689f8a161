"""Massive activations (Sun et al. 2024, "Massive activations in large language models"): per layer the
largest |entries| of the residual stream leaving the layer against the median |entry|, and which token
positions, token ids and channels carry them.

Streamed: per layer a running top-k of |h| (value, position, channel), merged chunk by chunk, and a
histogram of log10 |h| in bins of ``WIDTH`` from 1e-10 to 1e6 for the median over the whole text
(T x d entries, too many to keep): the median is its bin's geometric centre, within a factor
10^(WIDTH/2) (0.6 %) of the exact (lower) median; entries outside the range fall into the end bins.
Sun et al. see a few entries 1000x+ the median from the early-middle layers on, at the starting token
and at delimiter tokens ('.', '\\n'), in fixed channels.
"""
from __future__ import annotations

import torch
from torch import nn

from attnlab.core.metrics import follow
from attnlab.experiments.claims import check, finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register

LO, HI, WIDTH = -10.0, 6.0, 0.005  # log10 |h| histogram: range and bin width
BINS = round((HI - LO) / WIDTH)


def histogram_median(counts: torch.Tensor) -> float:
    """The lower median of the values a log10 histogram counted (the ceil(n/2)-th smallest), as the
    geometric centre of its bin."""
    cum = counts.cumsum(0)
    b = int(torch.searchsorted(cum, (int(cum[-1]) + 1) // 2))  # first bin holding the ceil(n/2)-th value
    return 10 ** (LO + (b + 0.5) * WIDTH)


def middle_layers(n: int) -> range:
    """Layers n/4 .. 3n/4 (exclusive): where Sun et al. find massive activations, past their onset in
    the early layers and before they fade in the last ones."""
    return range(n // 4, n - n // 4)


@register
class MassiveActivationProbe(Probe):
    name = "massive-activations"
    needs = ("blocks.*.resid_post",)
    summary = "Sun et al.'s massive activations: the largest |h| per layer over the median, their tokens and channels"

    bounds = {"entries": ">= 1", "ratio_min": "> 0", "delimiters": ">= 0"}
    decides_on_short_texts = True  # massive activations sit orders of magnitude past the bound on any text

    def __init__(self, entries: int = 10, ratio_min: float = 100.0, delimiters: tuple[int, ...] = ()):
        check_bounds(self, locals())
        self.k = int(entries)  # the largest |h| entries kept per layer
        self.ratio_min = float(ratio_min)  # the claim's threshold, fixed before any run
        self.delimiters = {int(i) for i in delimiters}  # token ids that count as delimiters ('.', '\n', ...)

    def attach(self, model: nn.Module, ids: torch.Tensor) -> None:
        d = arch.dims(model)
        self.ids = ids.detach().cpu().long()  # (T,) for the token ids of the top positions
        self.d = d.d_model
        self.hist = torch.zeros(d.n_layers, BINS, dtype=torch.long)  # (L, BINS) counts of log10 |h|
        self.top_v = [torch.empty(0) for _ in range(d.n_layers)]  # per layer: top |h| so far, descending
        self.top_at = [torch.empty(0, 2, dtype=torch.long) for _ in range(d.n_layers)]  # (k, 2) position, channel

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        i = layer_of(name)
        a = t[0].abs().float()  # (q, d)
        self.hist, self.top_v[i], self.top_at[i] = follow(a, self.hist, self.top_v[i], self.top_at[i])
        b = ((a.clamp(min=1e-30).log10() - LO) / WIDTH).floor().clamp(0, BINS - 1).long()  # (q, d) bin index
        self.hist[i] += torch.bincount(b.flatten(), minlength=BINS)
        v, j = a.flatten().topk(min(self.k, a.numel()))  # this chunk's top entries
        at = torch.stack([start + j // a.shape[1], j % a.shape[1]], -1)  # (k, 2) absolute position, channel
        v, at = torch.cat([self.top_v[i], v]), torch.cat([self.top_at[i], at])
        keep = v.topk(min(self.k, v.numel())).indices  # merged with the top so far
        self.top_v[i], self.top_at[i] = v[keep], at[keep]

    def result(self) -> dict:
        self.hist = self.hist.cpu()
        self.top_v, self.top_at = [v.cpu() for v in self.top_v], [a.cpu() for a in self.top_at]
        median = [histogram_median(h) for h in self.hist]
        top = [[{"value": float(v), "position": int(p), "token": int(self.ids[p]), "channel": int(c)}
                for v, (p, c) in zip(vs, at.tolist())] for vs, at in zip(self.top_v, self.top_at)]
        return {
            "median": median,
            "max": [float(v[0]) for v in self.top_v],
            "ratio": [float(v[0]) / m for v, m in zip(self.top_v, median)],
            "top3": [v[:3].tolist() for v in self.top_v],  # Sun et al.'s figure: top 1, 2, 3 against the median
            "top": top,  # per layer, the ``entries`` largest |h| entries with their position, token id and channel
            "channels": [sorted({e["channel"] for e in layer}) for layer in top],
            "delimiters": sorted(self.delimiters),
        }

    def claims(self, metrics: dict) -> list:
        ratio = metrics["ratio"]
        mid = middle_layers(len(ratio))
        i = max(mid, key=lambda j: ratio[j])  # the middle layer with the most massive activation
        first = metrics["top"][i][0]
        at_sink = first["position"] == 0 or first["token"] in self.delimiters
        out = [
            check(f"massive activations: max |h| / median |h| >= {self.ratio_min:g} in some middle layer "
                  f"({mid.start}..{mid.stop - 1}) (Sun et al. 2024)", ratio[i], self.ratio_min, 0.0, "at_least"),
            check(f"the largest |h| of that layer (layer {i}) sits at position 0 or on a delimiter token "
                  f"(ids {sorted(self.delimiters)})", float(at_sink), 1.0, 0.0, "at_least"),
        ]
        for j, layer in enumerate(metrics["top"]):
            e = layer[0]
            out.append(finding(f"layer {j}: max |h| / median |h| (largest at position {e['position']}, "
                               f"token {e['token']}, channel {e['channel']})", ratio[j]))
        return out

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        return {massive_figure(ctx, metrics, self.ratio_min): "Per layer: the three largest |h| of the residual "
                "stream and the median |h| (left), and max / median (right), log scale (Sun et al.'s massive "
                "activations)."}


def massive_figure(ctx, metrics: dict, ratio_min: float, name: str = "massive_activations.png") -> str:
    """Left: top-1/2/3 |h| and the median per layer; right: max / median per layer with the claim's line."""
    from attnlab.core.plotting import plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    layers = range(len(metrics["median"]))
    for r in range(3):
        axes[0].plot(layers, [v[r] if len(v) > r else float("nan") for v in metrics["top3"]], "o-", ms=3,
                     label=f"top {r + 1}")
    axes[0].plot(layers, metrics["median"], "k:", label="median")
    axes[0].set(xlabel="layer", ylabel="|h| (resid_post)", yscale="log", title="largest activations per layer")
    axes[0].legend(fontsize=7)
    axes[1].plot(layers, metrics["ratio"], "o-", ms=3, color="C3")
    axes[1].axhline(ratio_min, color="grey", ls="--", lw=0.8, label=f"{ratio_min:g}x (claim)")
    axes[1].set(xlabel="layer", ylabel="max |h| / median |h|", yscale="log", title="massive activations")
    axes[1].legend(fontsize=7)
    return ctx.savefig(fig, name)
