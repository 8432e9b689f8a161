"""Scan&Snap in the wild: does a pretrained model attend more to *distinct* key tokens than to *common* ones?

Scan&Snap (Tian et al., NeurIPS 2023) proves that a 1-layer transformer's attention logit z_ml grows for
*distinct* tokens l (they co-occur with the query m's class and with little else) and shrinks for *common*
ones: attention learns a TF-IDF. In a pretrained model the same question reads: does attention from a
query token q to a key token k rise with their association and fall with k's frequency?

Corpus statistics, from the streamed text itself (``attach``), with T tokens and a window w (``window``):

- frequency f(v) = c(v) / T, c(v) the count of token v;
- co-occurrence C(q, k) = #{(i, j): ids[i] = q, ids[j] = k, i - w <= j < i} (the key before the query, as
  attention reads it), over P = Σ_{d=1..w} (T - d) pairs; under independence E(q, k) = P f(q) f(k);
- PMI(q, k) = log (C(q, k) + α) / (E(q, k) + α): with α = 0 the textbook log p(q, k) / (p(q) p(k)),
  p(q, k) = C / P; α (default 1, one pseudo-pair) shrinks pairs seen once or never towards 0, so a rare
  pair cannot top the ranking on one co-occurrence (unseen pairs get log α / (E + α) <= 0).

Attention side, per layer: for a query position i and a key position j with 1 <= j < i - ``gap`` (not the
sink at 0, not the query itself, and by default not within the PMI window: a key there would count its
own co-occurrence into the PMI it is compared with, and recency alone would then look like association),
each head's a[i, j] relative to uniform over those keys, a[i, j] / Σ_j' a[i, j'] · n_i (n_i = i - gap - 1
keys; 1 = uniform), averaged over heads. Spearman ρ over the pooled (i, j) pairs, with PMI(ids[i], ids[j])
and with f(ids[j]); per head too. Effect size: the mean relative attention on the pairs in the top quartile of
PMI (frequency) over that in the bottom quartile (`top_over_bottom_*`; > 1: attention favours high values).

Sampling (bounded memory): each chunk draws ``pairs`` (i, j) -- i uniform over the chunk's eligible
queries, j uniform over its eligible keys -- with a seeded generator, the same pairs for every layer; a
bottom-k reservoir (each pair a uniform key, the ``max_pairs`` smallest kept) holds a uniform sample of
all drawn pairs, so the probe keeps at most max_pairs x (layers x heads + 3) numbers at any text length,
beside the text's statistics (token counts and the co-occurrence table: at most T x w pairs, built once).

Control: the same attention with PMI (frequency) permuted across the pairs, ``shuffles`` times, gives the
ρ that chance gives; its [1 - level, level] quantiles (1 %, 99 %) are the band a measured ρ must leave.

Claims (fixed here before the first SmolLM2 run, 2026-11-24): in the lower third of the layers
(``lower`` = 1/3: layers 0 .. round(L/3) - 1, 0..9 of SmolLM2's 30), in at least ``share`` (2/3) of
them (a) attention correlates positively with PMI beyond the shuffled control's 99th percentile and
(b) negatively with key frequency beyond its 1st percentile. The lower-third means of ρ are findings.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.experiments.claims import check, finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register


class CoOccurrence:
    """Token counts and windowed co-occurrence counts of one text ``ids`` (T,); see the module docstring."""

    def __init__(self, ids: torch.Tensor, window: int, alpha: float):
        ids = ids.long().flatten()
        self.T, self.window, self.alpha = ids.numel(), window, alpha
        self.vocab = int(ids.max()) + 1
        self.counts = torch.bincount(ids, minlength=self.vocab).double()  # (V,) c(v)
        keys = torch.cat([ids[d:] * self.vocab + ids[:-d] for d in range(1, min(window, self.T - 1) + 1)])
        self.pair_keys, pair_counts = torch.unique(keys, return_counts=True)  # sorted q * V + k, C(q, k)
        self.pair_counts = pair_counts.double()
        self.P = keys.numel()  # Σ_d (T - d)

    def freq(self, k: torch.Tensor) -> torch.Tensor:
        """f(k) = c(k) / T, for token ids k (any shape)."""
        return self.counts[k] / self.T

    def cooc(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """C(q, k): how often k stands 1..window tokens before q."""
        key = q.long() * self.vocab + k.long()
        at = torch.searchsorted(self.pair_keys, key).clamp(max=self.pair_keys.numel() - 1)
        return torch.where(self.pair_keys[at] == key, self.pair_counts[at], 0.0)

    def pmi(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """log (C(q, k) + α) / (P f(q) f(k) + α)."""
        expected = self.P * self.freq(q) * self.freq(k)
        return torch.log((self.cooc(q, k) + self.alpha) / (expected + self.alpha))


def _unit_ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis, centred and scaled to unit norm: Spearman ρ = their dot product."""
    from scipy.stats import rankdata

    r = rankdata(x, axis=-1)
    r = r - r.mean(-1, keepdims=True)
    return r / np.maximum(np.linalg.norm(r, axis=-1, keepdims=True), 1e-300)


def spearman_with_null(att: np.ndarray, x: np.ndarray, shuffles: int, seed: int, level: float) -> dict:
    """att: (..., N) attention values, x: (N,) -> ρ (...,), and the [1 - level, level] quantiles of ρ
    with x permuted across the N pairs (the permutations shared by every row of ``att``)."""
    ra, rx = _unit_ranks(att), _unit_ranks(x)
    rng = np.random.default_rng(seed)
    null = np.stack([ra @ rx[rng.permutation(rx.size)] for _ in range(shuffles)])  # (shuffles, ...)
    return {"rho": ra @ rx, "lo": np.quantile(null, 1 - level, axis=0), "hi": np.quantile(null, level, axis=0)}


@register
class ScanSnapProbe(Probe):
    """Per layer: Spearman ρ of attention with PMI(query, key) and with key frequency, against a shuffled control."""

    name = "scan-snap"
    needs = ("blocks.*.attn.pattern",)
    summary = "Scan&Snap: per-layer rank correlation of attention with PMI(query, key) and key frequency vs shuffles"

    bounds = {"window": ">= 1", "gap": ">= 0", "alpha": ">= 0", "pairs": ">= 1", "max_pairs": ">= 2",
              "shuffles": ">= 1", "seed": ">= 0", "level": "(0.5, 1)", "lower": "(0, 1]", "share": "[0, 1]"}

    def __init__(self, window: int = 8, gap: int | None = None, alpha: float = 1.0, pairs: int = 1024,
                 max_pairs: int = 16384, shuffles: int = 200, seed: int = 0, level: float = 0.99,
                 lower: float = 1 / 3, share: float = 2 / 3):
        check_bounds(self, locals())
        gap = window if gap is None else gap
        self.window, self.gap, self.alpha, self.pairs, self.max_pairs = window, gap, alpha, pairs, max_pairs
        self.shuffles, self.seed, self.level, self.lower, self.share = shuffles, seed, level, lower, share

    def attach(self, model: nn.Module, ids: torch.Tensor) -> None:
        d = arch.dims(model)
        self.ids = ids.detach().long().flatten().cpu()
        if self.ids.numel() < self.gap + 3:
            raise UsageError(f"scan-snap: the text has {self.ids.numel()} tokens; the probe needs at least gap + 3 "
                             f"= {self.gap + 3} (a query with a key beyond the sink and the gap)")
        self.stats = CoOccurrence(self.ids, self.window, self.alpha)
        self.n_layers, self.n_heads = d.n_layers, d.n_heads
        self.gen = torch.Generator().manual_seed(self.seed)
        self.q_pos = self.k_pos = torch.zeros(0, dtype=torch.long)  # (N,) the kept pairs' positions i, j
        self.u = torch.zeros(0)  # (N,) their reservoir keys
        self.att = [torch.zeros(0, d.n_heads) for _ in range(d.n_layers)]  # per layer (N, H)
        self._start, self._keep, self._new = -1, None, None

    def _draw(self, start: int, t: int) -> None:
        """A new chunk: draw its pairs and decide which pairs (old + new) the reservoir keeps."""
        lo = max(start, self.gap + 2)  # a query needs a key in 1 .. i - gap - 1
        n = self.pairs if lo < start + t else 0
        i = torch.randint(lo, start + t, (n,), generator=self.gen) if n else torch.zeros(0, dtype=torch.long)
        j = 1 + (torch.rand(n, generator=self.gen, dtype=torch.float64) * (i - self.gap - 1)).long()
        u = torch.cat([self.u, torch.rand(n, generator=self.gen)])
        keep = u.topk(min(self.max_pairs, u.numel()), largest=False).indices.sort().values  # bottom-k
        self.q_pos, self.k_pos = torch.cat([self.q_pos, i])[keep], torch.cat([self.k_pos, j])[keep]
        self.u, self._keep, self._new, self._start = u[keep], keep, (i, j), start

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        if start != self._start:
            self._draw(start, t.shape[2])
        layer = layer_of(name)
        i, j = self._new
        p = t[0].float()  # (H, t, S)
        r = i - start  # rows of the sampled queries in this chunk
        band = i[:, None] - torch.arange(self.gap + 1)  # (n, gap + 1): keys i - gap .. i
        near = p[:, r[:, None], band].double().sum(-1)  # (H, n)
        # the row (sums to 1) minus the sink and the band, in float64: a strong sink leaves little mass here
        eligible = p.sum(-1)[:, r].double() - p[:, r, 0].double() - near  # (H, n): keys 1 .. i-gap-1
        rel = (p[:, r, j] / eligible.clamp(min=1e-12)).float().cpu() * (i - self.gap - 1)  # (H, n): 1 = uniform
        self.att[layer] = torch.cat([self.att[layer], rel.T])[self._keep]  # (N, H)

    def result(self) -> dict:
        if self.q_pos.numel() < 3:
            raise UsageError(f"scan-snap: only {self.q_pos.numel()} (query, key) pairs were drawn; stream a longer "
                             f"text (more than gap + 3 = {self.gap + 3} tokens)")
        q, k = self.ids[self.q_pos], self.ids[self.k_pos]
        pmi, freq = self.stats.pmi(q, k).numpy(), self.stats.freq(k).numpy()
        heads = torch.stack(self.att).numpy().transpose(0, 2, 1)  # (L, H, N)
        layer = heads.mean(1)  # (L, N): the average head's relative attention
        out = {"tokens": self.stats.T, "window": self.window, "gap": self.gap, "alpha": self.alpha,
               "pairs": int(q.numel()), "level": self.level, "lower_layers": self._n_lower(self.n_layers),
               "distinct_tokens": int((self.stats.counts > 0).sum()),
               "rho_pmi_freq": float(_unit_ranks(pmi) @ _unit_ranks(freq))}
        for what, x in (("pmi", pmi), ("freq", freq)):
            s = spearman_with_null(layer, x, self.shuffles, self.seed, self.level)
            out[f"rho_{what}"] = s["rho"].tolist()
            out[f"null_{what}"] = np.stack([s["lo"], s["hi"]], 1).tolist()  # (L, 2)
            out[f"rho_{what}_heads"] = (_unit_ranks(heads) @ _unit_ranks(x)).tolist()  # (L, H)
            top, bottom = x >= np.quantile(x, 0.75), x <= np.quantile(x, 0.25)  # effect size: quartiles of x
            out[f"top_over_bottom_{what}"] = (layer[:, top].mean(1) / layer[:, bottom].mean(1)).tolist()
        return out

    def _n_lower(self, n_layers: int) -> int:
        return max(1, round(n_layers * self.lower))

    def claims(self, metrics: dict) -> list:
        n = metrics["lower_layers"]
        rho_p, rho_f = metrics["rho_pmi"][:n], metrics["rho_freq"][:n]
        beyond_p = [r > hi for r, (lo, hi) in zip(rho_p, metrics["null_pmi"])]
        beyond_f = [r < lo for r, (lo, hi) in zip(rho_f, metrics["null_freq"])]
        where = f"layers 0..{n - 1}"

        def note(rhos, band, side):
            return (f"measured ρ per layer {', '.join(f'{r:+.3f}' for r in rhos)}; shuffled control's "
                    f"{side} {', '.join(f'{b:+.3f}' for b in band)} ({metrics['pairs']} pairs)")

        q = f"{self.level:.0%}"
        return [
            check(f"Scan&Snap in {where}: attention rises with PMI(query, key) beyond the shuffled control's {q} "
                  f"quantile in >= {self.share:.0%} of the layers (share of layers)", float(np.mean(beyond_p)),
                  self.share, 1e-9, "at_least").because(note(rho_p, [hi for _, hi in metrics["null_pmi"][:n]], q)),
            check(f"Scan&Snap in {where}: attention falls with key frequency beyond the shuffled control's "
                  f"{1 - self.level:.0%} quantile in >= {self.share:.0%} of the layers (share of layers)",
                  float(np.mean(beyond_f)), self.share, 1e-9, "at_least").because(
                note(rho_f, [lo for lo, _ in metrics["null_freq"][:n]], f"{1 - self.level:.0%}")),
            finding(f"mean Spearman ρ(attention, PMI) in {where}", float(np.mean(rho_p))),
            finding(f"mean Spearman ρ(attention, key frequency) in {where}", float(np.mean(rho_f))),
            # ranks count every pair alike; these means show where the attention mass goes (a few common keys
            # that collect much attention, such as punctuation, raise the frequency ratio, not the rank)
            finding(f"attention on top-quartile-PMI keys / bottom-quartile keys, mean over {where}",
                    float(np.mean(metrics["top_over_bottom_pmi"][:n]))),
            finding(f"attention on the most frequent quartile of keys / the rarest quartile, mean over {where}",
                    float(np.mean(metrics["top_over_bottom_freq"][:n]))),
        ]

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        return {scansnap_figure(ctx, metrics): (
            "Scan&Snap in the wild: per layer, Spearman ρ between the attention a key receives (relative to "
            "uniform, averaged over heads; dots: single heads) and its PMI with the query (left) or its token "
            f"frequency (right), with the shuffled control's [{1 - metrics['level']:.0%}, {metrics['level']:.0%}] "
            "band; the shaded layers are the lower third the claims are about.")}


def scansnap_figure(ctx, metrics: dict, name: str = "scansnap.png") -> str:
    """Two panels (PMI, frequency): ρ per layer, per-head dots, the shuffled band, the lower third shaded."""
    from attnlab.core.plotting import plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained", sharey=True)
    for ax, what, label in zip(axes, ("pmi", "freq"), ("PMI(query, key)", "key token frequency")):
        rho, band, heads = (np.asarray(metrics[k]) for k in (f"rho_{what}", f"null_{what}", f"rho_{what}_heads"))
        layers = np.arange(rho.size)
        ax.axvspan(-0.5, metrics["lower_layers"] - 0.5, color="0.92", lw=0)
        ax.fill_between(layers, band[:, 0], band[:, 1], color="C7", alpha=0.4, label="shuffled control")
        color = "C0" if what == "pmi" else "C3"
        ax.plot(np.repeat(layers, heads.shape[1]), heads.ravel(), ".", color=color, ms=2, alpha=0.35)
        ax.plot(layers, rho, "o-", color=color, ms=3.5, label="mean over heads")
        ax.axhline(0, color="k", lw=0.6)
        ax.set(xlabel="layer", title=f"attention vs {label}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("Spearman ρ")
    return ctx.savefig(fig, name)
