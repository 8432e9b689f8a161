"""Pattern superposition: the top-activating contexts of MLP neurons over a corpus, and how many unrelated
clusters of contexts make each neuron fire (one neuron, two unrelated contexts: a polysemantic neuron).

Streaming keeps, per chosen layer, a running top-k of each neuron's activation (the input of the MLP's
output projection, ``mlp.post``) with its position: k x d_ff values, whatever the text's length. The
contexts are read back from the ids afterwards. Position 0 is left out: the sink's activations are
outliers by orders of magnitude (massive activations) and would fill the lists of the neurons carrying them.

Polysemanticity of a neuron: its top contexts (those with a positive activation) are compared by the
tokens the neuron could see, the firing token and the ``window`` before it (an MLP neuron at position p
is a function of tokens <= p only; later tokens would be noise). Each context is a bag of those tokens,
token v at distance r from the firing token weighted idf(v) / (1 + r), idf(v) = log(T / count of v in
the text): a shared rare token near the firing position makes two contexts alike, a shared "the" far
back hardly does. Two contexts are linked when their cosine is >= ``threshold`` (0.3); clusters are the
connected components (single linkage: deterministic, no number of clusters to choose, and a neuron's
contexts chain through shared phrases). A cluster counts when it holds >= ``min_cluster`` contexts (3),
so a stray context is not a meaning; a neuron with >= 2 such clusters is polysemantic. The measure is
lexical: two clusters are contexts that share no nearby informative token, not a human's judgement.
"""
from __future__ import annotations

from typing import Callable

import torch

from attnlab.core.errors import UsageError
from attnlab.core.metrics import follow
from attnlab.experiments.claims import finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register


def spread_layers(n_layers: int) -> list[int]:
    """The default layers: a quarter, half and three quarters of the way through the model."""
    return sorted({round(q * (n_layers - 1)) for q in (0.25, 0.5, 0.75)})


def context_similarity(ids: torch.Tensor, positions: torch.Tensor, window: int, idf: torch.Tensor) -> torch.Tensor:
    """(n, n) cosine between the contexts ending at ``positions`` (n,): bags of the token at each position
    and the ``window`` before it, token v at distance r weighted idf[v] / (1 + r)."""
    r = torch.arange(window + 1)  # (w+1,) distance back from the firing token
    at = positions[:, None] - r  # (n, w+1) positions of the context's tokens
    tokens = ids[at.clamp(min=0)]  # (n, w+1)
    weight = idf[tokens] / (1 + r) * (at >= 0)  # (n, w+1)
    vocab, col = tokens.unique(return_inverse=True)  # the tokens these contexts use
    bags = torch.zeros(len(positions), len(vocab), dtype=torch.float64)  # (n, V')
    bags.scatter_add_(1, col, weight.double())
    bags = torch.nn.functional.normalize(bags, dim=1)
    return bags @ bags.T  # (n, n)


def clusters(similar: torch.Tensor) -> list[list[int]]:
    """Connected components of the graph ``similar`` (n, n) bool, largest first (ties: by first member)."""
    n, label = similar.shape[0], list(range(similar.shape[0]))

    def root(i: int) -> int:
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    for a, b in similar.triu(1).nonzero().tolist():
        label[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


@register
class SuperpositionProbe(Probe):
    """Per chosen layer: each MLP neuron's top contexts and the number of unrelated clusters among them."""

    name = "superposition"
    needs = ("blocks.*.mlp.post",)
    windowed = True  # top contexts over >= 100k tokens: independent windows, no long prefix needed
    summary = "pattern superposition: MLP neurons' top contexts and how many unrelated clusters they form"

    bounds = {"layers": ">= 0", "neurons": ">= 1", "top": ">= 1", "window": ">= 1", "threshold": "[0, 1]",
              "min_cluster": ">= 1"}

    def __init__(self, layers: tuple[int, ...] | None = None, neurons: int = 3, top: int = 20, window: int = 8,
                 threshold: float = 0.3, min_cluster: int = 3, decode: Callable[[list[int]], str] | None = None):
        check_bounds(self, locals())
        self.chosen = None if layers is None else sorted(set(int(i) for i in layers))
        if self.chosen is not None:  # trace only these (stream checks the indices against the model)
            self.needs = tuple(f"blocks.{i}.mlp.post" for i in self.chosen)
        self.neurons, self.top, self.window = neurons, top, window
        self.threshold, self.min_cluster = threshold, min_cluster
        self.decode = decode

    def attach(self, model, ids) -> None:
        d = arch.dims(model)
        self.layers = self.chosen if self.chosen is not None else spread_layers(d.n_layers)
        bad = [i for i in self.layers if not 0 <= i < d.n_layers]
        if bad:
            raise UsageError(f"superposition layers {bad}: out of range (this model has {d.n_layers} layers, "
                             f"0..{d.n_layers - 1})")
        if ids.numel() < 2:
            raise UsageError(f"the superposition probe needs at least 2 tokens (position 0 is left out); "
                             f"got {ids.numel()}")
        self.ids = ids.cpu()
        self.values = {i: torch.full((self.top, d.d_ff), -torch.inf) for i in self.layers}  # (k, d_ff) running top-k
        self.positions = {i: torch.full((self.top, d.d_ff), -1) for i in self.layers}  # (k, d_ff)

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        i = layer_of(name)
        if i not in self.values:
            return
        h = t[0].float()  # (t, d_ff)
        self.values[i], self.positions[i] = follow(h, self.values[i], self.positions[i])
        pos = torch.arange(start, start + h.shape[0], device=h.device)  # (t,)
        if start == 0:  # leave the sink position out
            h, pos = h[1:], pos[1:]
        values = torch.cat([self.values[i], h])  # (k + t, d_ff)
        positions = torch.cat([self.positions[i], pos[:, None].expand_as(h)])  # (k + t, d_ff)
        best = values.topk(self.top, dim=0)
        self.values[i], self.positions[i] = best.values, positions.gather(0, best.indices)

    def neuron_clusters(self, layer: int, n: int, idf: torch.Tensor) -> tuple[list[list[int]], torch.Tensor, ...]:
        """(clusters as lists of indices into the neuron's positive top contexts, their values (m,), their
        positions (m,)), largest value first."""
        live = self.values[layer][:, n] > 0
        values, positions = self.values[layer][live, n], self.positions[layer][live, n]  # (m,) largest first
        sim = context_similarity(self.ids, positions, self.window, idf)
        return clusters(sim >= self.threshold), values, positions

    def context(self, p: int, value: float) -> dict:
        """The window on each side of position ``p``: ids, and text when a decoder was given."""
        before, token, after = (self.ids[max(0, p - self.window):p].tolist(), int(self.ids[p]),
                                self.ids[p + 1:p + 1 + self.window].tolist())
        out = {"position": p, "value": value, "before": before, "token": token, "after": after}
        if self.decode is not None:
            out["text"] = f"{self.decode(before)}[[{self.decode([token])}]]{self.decode(after)}"
        return out

    def result(self) -> dict:
        self.values = {i: v.cpu() for i, v in self.values.items()}
        self.positions = {i: p.cpu() for i, p in self.positions.items()}
        counts = torch.bincount(self.ids).double()  # (V,)
        idf = (self.ids.numel() / counts.clamp(min=1)).log()  # (V,) idf of the text's tokens
        out = {"layers": self.layers, "top": self.top, "window": self.window, "threshold": self.threshold,
               "min_cluster": self.min_cluster, "per_layer": []}
        for layer in self.layers:
            major, examples = [], []
            firing = (self.values[layer] > 0).sum(0) >= self.min_cluster  # (d_ff,) enough positive contexts
            for n in firing.nonzero()[:, 0].tolist():
                groups, values, positions = self.neuron_clusters(layer, n, idf)
                big = [g for g in groups if len(g) >= self.min_cluster]
                major.append(len(big))
                if len(big) >= 2:  # a polysemantic candidate: the top context of each major cluster
                    examples.append({"neuron": n, "max": float(values[0]), "clusters": len(big),
                                     "sizes": [len(g) for g in big],
                                     "contexts": [self.context(int(positions[g[0]]), float(values[g[0]]))
                                                  for g in big]})
            major_t = torch.tensor(major, dtype=torch.long)
            examples.sort(key=lambda e: -e["max"])  # the strongest-firing polysemantic neurons first
            out["per_layer"].append({
                "layer": layer, "neurons": self.values[layer].shape[1], "firing": len(major),
                "clusters_hist": torch.bincount(major_t).tolist() if len(major) else [],
                "mean_clusters": float(major_t.double().mean()) if len(major) else None,  # strict JSON: no NaN
                "polysemantic_share": float((major_t >= 2).double().mean()) if len(major) else None,
                "examples": examples[:self.neurons]})
        return out

    def claims(self, metrics: dict) -> list:
        firing = sum(p["firing"] for p in metrics["per_layer"])
        poly = sum(p["polysemantic_share"] * p["firing"] for p in metrics["per_layer"] if p["firing"])
        return [finding(f"share of firing MLP neurons in layers {metrics['layers']} whose top-{metrics['top']} "
                        f"contexts form >= 2 unrelated clusters (pattern superposition)", poly / max(firing, 1))]

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        from attnlab.core.plotting import plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        per = metrics["per_layer"]
        width = 0.8 / max(len(per), 1)
        for j, p in enumerate(per):
            hist = torch.tensor(p["clusters_hist"], dtype=torch.float64)
            share = hist / max(p["firing"], 1)
            ax.bar([k + j * width for k in range(len(hist))], share.tolist(), width, label=f"layer {p['layer']}")
        ax.set(xlabel=f"clusters of >= {metrics['min_cluster']} contexts among the top {metrics['top']}",
               ylabel="share of firing neurons", title="pattern superposition: unrelated context clusters per neuron")
        ax.legend()
        example = next(((p["layer"], p["examples"][0]) for p in per if p["examples"]), None)
        caption = ("Distribution over MLP neurons of the number of unrelated clusters among their top-activating "
                   "contexts (>= 2: polysemantic).")
        if example is not None:
            layer, ex = example
            shown = [c.get("text", f"token id {c['token']}") for c in ex["contexts"][:2]]  # text when decodable
            caption += f" E.g. layer {layer} neuron {ex['neuron']} fires on {shown[0]!r} and on {shown[1]!r}."
        return {ctx.savefig(fig, "superposition.png"): caption}
