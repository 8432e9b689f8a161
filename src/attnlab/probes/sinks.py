"""Attention sinks: per layer and head, how much attention goes to the first token(s) (Gu et al., ICLR 2025).

For each layer l and head h, the mean over query positions i >= ``first`` of a[i, 0] (the first-token
share, ``core.metrics.sink_share``) and of Σ_{j<first} a[i, j] (the first-``first`` share, StreamingLLM's
four sink tokens). Queries at positions < ``first`` are left out: causality forces their whole row onto
keys 0..i, all inside the first tokens, so they would count as sinks whatever the model learned. (Gu et
al. average over every query; over 2,048 tokens the 4 left out move a mean by at most 0.2 %.)

Gu et al.'s sink rate ("When attention sink emerges in language models", ICLR 2025): the share of heads
whose mean first-token share exceeds ε (0.3), overall and per layer. Chance reference: a uniform causal
row at position i puts 1/(i+1) on key 0 (``first``/(i+1) on the first ``first``), averaged over the same
queries -- about 0.004 over 2,048 tokens; no head of a uniform model reaches ε.

Claims (thresholds fixed in the constructor before any run on SmolLM2):

- "most layers beyond the first two have a strong first-token sink": a layer has one when its sink rate
  exceeds ``strong_rate`` (0.5: most of its heads put > ε on token 0); the claim holds when at least
  ``layer_share`` (0.5) of the layers >= ``from_layer`` (2) do. The first two layers are left out because
  sinks form after the first layers, which still read local context (Gu et al., Xiao et al.);
- "the first-token share is well above chance": the mean first-token share over the heads of layers
  >= ``from_layer`` is at least ``above_chance`` (10) times the uniform causal row's;
- the sink rate over all heads is reported as a finding (the number Gu et al. tabulate).

:func:`position_check` runs the probe again with the first token replaced (by "\\n" or an ordinary
token): if the sink is positional, not semantic, the first-token share of layers >= ``from_layer``
stays within ``position_tol`` (20 %, relative) of the original (StreamingLLM's "4 '\\n' + 1020" row).
"""
from __future__ import annotations

import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.core.metrics import follow, sink_share
from attnlab.experiments.claims import check, finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register


def chance_share(first: int, n_tokens: int) -> tuple[float, float]:
    """Mean share a uniform causal row puts on key 0 and on keys 0..first-1, over queries first..n_tokens-1."""
    rows = torch.arange(first, n_tokens, dtype=torch.float64) + 1  # row lengths i + 1
    return float((1 / rows).mean()), float((first / rows).mean())


@register
class SinkProbe(Probe):
    """Per layer and head: attention on the first token and on the first ``first`` tokens; the sink rate."""

    decides_on_short_texts = True  # a sink is far above chance on any text (170x at 4,096 tokens)

    name = "sinks"
    needs = ("blocks.*.attn.pattern",)
    summary = "attention sinks: share on the first token / first 4, Gu et al.'s sink rate (eps 0.3)"
    bounds = {"first": ">= 1", "eps": "(0, 1)", "from_layer": ">= 0", "strong_rate": "[0, 1]", "layer_share": "[0, 1]",
              "above_chance": "> 0", "position_tol": ">= 0"}

    def __init__(self, first: int = 4, eps: float = 0.3, from_layer: int = 2, strong_rate: float = 0.5,
                 layer_share: float = 0.5, above_chance: float = 10.0, position_tol: float = 0.2):
        check_bounds(self, locals())
        self.first, self.eps, self.from_layer = first, eps, from_layer
        self.strong_rate, self.layer_share, self.above_chance = strong_rate, layer_share, above_chance
        self.position_tol = position_tol

    def attach(self, model: nn.Module, ids: torch.Tensor) -> None:
        d = arch.dims(model)
        self.n_tokens = int(ids.numel())
        if self.n_tokens <= self.first:
            raise UsageError(f"sinks: the text has {self.n_tokens} tokens; the probe needs more than first="
                             f"{self.first} (queries before it are left out)")
        self.on_first = torch.zeros(d.n_layers, d.n_heads, dtype=torch.float64)  # Σ_i a[i, 0]
        self.on_k = torch.zeros(d.n_layers, d.n_heads, dtype=torch.float64)  # Σ_i Σ_{j<first} a[i, j]
        self.queries = torch.zeros(d.n_layers, dtype=torch.long)

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        layer = layer_of(name)
        rows = t[0, :, max(0, self.first - start):]  # (H, q, S): the queries at positions >= first; a view
        self.on_first, self.on_k, self.queries = follow(t, self.on_first, self.on_k, self.queries)
        # float64 only for the few columns read: a copy of the whole chunk would be H x q x S doubles
        self.on_first[layer] += sink_share(rows).double().sum(-1)  # (H,)
        self.on_k[layer] += rows[..., :self.first].double().sum((-1, -2))  # (H,)
        self.queries[layer] += rows.shape[1]

    def result(self) -> dict:
        n = self.queries.cpu().clamp(min=1).double()[:, None]  # (L, 1)
        share, share_k = self.on_first.cpu() / n, self.on_k.cpu() / n  # (L, H)
        sinks = (share > self.eps).double()  # (L, H): Gu et al.'s sink heads
        chance, chance_k = chance_share(self.first, self.n_tokens)
        return {"first": self.first, "eps": self.eps, "from_layer": self.from_layer,
                "queries": int(self.queries[0]), "first_token_share": share.tolist(),
                "first_k_share": share_k.tolist(), "layer_first_token_share": share.mean(1).tolist(),
                "layer_first_k_share": share_k.mean(1).tolist(), "sink_rate": float(sinks.mean()),
                "sink_rate_per_layer": sinks.mean(1).tolist(),
                "deep_first_token_share": deep_share(share.tolist(), self.from_layer),
                "chance_first_token_share": chance, "chance_first_k_share": chance_k}

    def claims(self, m: dict) -> list:
        rates = m["sink_rate_per_layer"][self.from_layer:]
        strong = sum(r > self.strong_rate for r in rates) / max(len(rates), 1)
        deep, chance = m["deep_first_token_share"], m["chance_first_token_share"]
        return [
            check(f"most layers beyond the first {self.from_layer} have a strong first-token sink: share of layers "
                  f">= {self.from_layer} whose sink rate (heads with first-token share > {self.eps:g}) exceeds "
                  f"{self.strong_rate:g}", strong, self.layer_share, 0.0, "at_least"),
            check(f"first-token share well above chance: mean over the heads of layers >= {self.from_layer} "
                  f"({deep:.3f}) / a uniform causal row's ({chance:.4f})", deep / chance, self.above_chance, 0.0,
                  "at_least"),
            finding(f"sink rate (Gu et al.): share of all heads whose mean first-token share exceeds {self.eps:g}",
                    m["sink_rate"]),
            finding(f"mean share of attention on the first {self.first} tokens, all heads (chance "
                    f"{m['chance_first_k_share']:.4f})", sum(m["layer_first_k_share"]) / len(m["layer_first_k_share"])),
        ]

    def figures(self, m: dict, ctx) -> dict[str, str]:
        from attnlab.probes.plots import layer_head_heatmap

        name = layer_head_heatmap(ctx, m["first_token_share"], "sinks_heads.png", "attention on the first token",
                                  "mean first-token share")
        return {name: f"Per layer and head: mean share of attention on the first token over queries at positions "
                      f">= {m['first']} ({m['queries']} queries); sink rate (share > {m['eps']:g}) "
                      f"{m['sink_rate']:.2f}; a uniform causal row gives {m['chance_first_token_share']:.4f}."}


def deep_share(share: list[list[float]], from_layer: int) -> float:
    """Mean first-token share over the heads of layers >= ``from_layer`` (all layers if there are none)."""
    rows = share[from_layer:] or share
    return sum(map(sum, rows)) / sum(map(len, rows))


def position_check(model: nn.Module, ids: torch.Tensor, replacements: dict[str, int], probe: SinkProbe,
                   chunk: int = 512, progress=None) -> dict[str, dict]:
    """The sink probe (``probe``'s options) rerun with ids[0] replaced by each token id: label -> result."""
    from attnlab.probes.stream import stream

    out = {}
    for label, token in replacements.items():
        swapped = ids.clone()
        swapped[0] = token
        again = SinkProbe(probe.first, probe.eps, probe.from_layer, probe.strong_rate, probe.layer_share,
                          probe.above_chance, probe.position_tol)
        stream(model, swapped, [again], chunk, progress)
        out[label] = again.result()
    return out


def position_claims(original: dict, replaced: dict[str, dict], probe: SinkProbe) -> list:
    """One claim per replacement: the first-token share of layers >= from_layer follows the position."""
    base = original["deep_first_token_share"]
    return [check(f"the sink follows the position, not the token: with the first token replaced by {label!r}, "
                  f"the mean first-token share of layers >= {probe.from_layer} (original {base:.3f}) stays within "
                  f"{probe.position_tol:.0%} of the original", m["deep_first_token_share"], base,
                  probe.position_tol, "rel")
            for label, m in replaced.items()]
