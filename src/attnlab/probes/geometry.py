"""Geometry of the residual stream: cross-layer similarity and attention entropy per layer, and JoMA's
orthogonal-embedding assumption measured on the hidden vectors of distinct tokens.

``similarity``: per layer the mean over tokens of cos(resid_pre_i, resid_post_i) (Deja Vu's "slowly
changing embeddings"; the running sums are ``attnlab.core.metrics.CosineSums``, the ones
``attnlab.sparsity`` adds up) and the mean attention entropy of the layer's pattern rows
(``attnlab.core.metrics.attention_entropy``), raw and divided by log(row length): a causal row of
query position p has p + 1 keys, so raw entropies of early and late rows do not compare.

``orthogonality``: JoMA assumes the embeddings of different tokens are (nearly) orthogonal. Per layer
(the token embeddings and every resid_post) the cosine between the hidden vectors of sampled pairs of
distinct tokens, against pairs of random Gaussian vectors of the same width, whose cosine has standard
deviation 1/sqrt(d). The layer satisfies the assumption when mean |cos| is within ``factor`` (2) of the
random one: a criterion fixed here, before any run on a real model. The same cosines are also reported
centred (each chunk's mean hidden vector over its positions, the sink left out, subtracted first): the
first SmolLM2 run found every layer's hidden vectors sharing one direction (mean cos = mean |cos| ~ 0.5,
the known anisotropy), and centring asks whether they are orthogonal apart from it. Added after that
run, the centred numbers are findings, never a claim.
"""
from __future__ import annotations

import math

import torch

from attnlab.core.errors import UsageError
from attnlab.core.metrics import CosineSums, attention_entropy, follow
from attnlab.experiments.claims import check, finding
from attnlab.models import arch
from attnlab.probes.base import Probe, check_bounds, layer_of, register


@register
class SimilarityProbe(Probe):
    """Per layer: mean cos(resid_pre, resid_post) over tokens; attention entropy, raw and normalised."""

    decides_on_short_texts = True  # consecutive layers' cosines are a property of the weights on any text

    name = "similarity"
    needs = ("blocks.*.resid_pre", "blocks.*.attn.pattern", "blocks.*.resid_post")
    summary = "cross-layer cosine of the residual stream and attention entropy per layer"

    bounds = {"cosine": "[-1, 1]", "cosine_share": "[0, 1]"}

    def __init__(self, cosine: float = 0.9, cosine_share: float = 0.5):
        check_bounds(self, locals())
        self.cosine, self.cosine_share = cosine, cosine_share  # Deja Vu's claim, as attnlab sparsity fixes it

    def attach(self, model, ids) -> None:
        if ids.numel() < 2:
            raise UsageError(f"the similarity probe needs at least 2 tokens (a one-key row has no entropy to "
                             f"normalise); got {ids.numel()}")
        d = arch.dims(model)
        self.cos = CosineSums(d.n_layers)
        self.entropy = torch.zeros(d.n_layers, d.n_heads, dtype=torch.float64)  # sum over rows, per head
        self.normalised = torch.zeros(d.n_layers, d.n_heads, dtype=torch.float64)  # rows with >= 2 keys
        self.rows = torch.zeros(d.n_layers, 2, dtype=torch.float64)  # rows seen; rows with >= 2 keys
        self._pre: torch.Tensor | None = None

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        i = layer_of(name)
        if name.endswith("resid_pre"):
            self._pre = t[0].to(torch.float64, copy=True)  # (t, d): held until this layer's resid_post
        elif name.endswith("resid_post"):
            self.cos.add(i, self._pre, t[0])
        else:
            # head by head: (t, S) temporaries, not (H, t, S) ones (0.3 GB a copy at 16k tokens for SmolLM2)
            ent = torch.stack([attention_entropy(head.float()) for head in t[0]]).double()  # (H, t)
            # (t,) causal row lengths
            keys = torch.arange(start + 1, start + ent.shape[1] + 1, dtype=torch.float64, device=ent.device)
            several = keys > 1  # a one-key row: entropy 0 out of a maximum log 1 = 0, no normalised value
            self.entropy, self.normalised, self.rows = follow(ent, self.entropy, self.normalised, self.rows)
            self.entropy[i] += ent.sum(1)
            self.normalised[i] += (ent[:, several] / keys[several].log()).sum(1)
            self.rows[i, 0] += ent.shape[1]
            self.rows[i, 1] += several.sum()

    def result(self) -> dict:
        cos = self.cos.mean()  # (L,)
        self.entropy, self.normalised, self.rows = (x.cpu() for x in (self.entropy, self.normalised, self.rows))
        heads = self.normalised / self.rows[:, 1:]  # (L, H)
        return {"cosine": cos.tolist(), "between": cos[1:].tolist(),
                "entropy": (self.entropy / self.rows[:, :1]).mean(1).tolist(),
                "entropy_normalised": heads.mean(1).tolist(), "entropy_normalised_heads": heads.tolist(),
                "tokens": int(self.rows[0, 0])}

    def claims(self, metrics: dict) -> list:
        between = torch.tensor(metrics["between"])
        if not between.numel():
            return []
        high = float((between > self.cosine).float().mean())
        return [check(f"consecutive-layer cosine cos(resid_post_(i-1), resid_post_i) > {self.cosine:g} in most layers "
                      f"(Deja Vu): share of layers 1..{len(between)} above it", high, self.cosine_share, 0.0,
                      "at_least"),
                finding("mean normalised attention entropy over layers (1 = uniform over the prefix, 0 = one key)",
                        float(torch.tensor(metrics["entropy_normalised"]).mean()))]

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        from attnlab.core.plotting import plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
        layers = range(len(metrics["cosine"]))
        a.plot(layers, metrics["cosine"], marker="o")
        a.axhline(self.cosine, color="grey", ls=":", label=f"Deja Vu's {self.cosine:g}")
        a.set(xlabel="layer i", ylabel="mean cos(resid_pre_i, resid_post_i)", title="residual stream across a layer")
        a.legend()
        heads = torch.tensor(metrics["entropy_normalised_heads"])  # (L, H)
        for h in range(heads.shape[1]):
            b.scatter(layers, heads[:, h], s=6, color="tab:blue", alpha=0.3)
        b.plot(layers, metrics["entropy_normalised"], marker="o", color="tab:blue", label="mean over heads")
        b.set(xlabel="layer", ylabel="entropy / log(keys)", ylim=(0, 1), title="attention entropy (dots: heads)")
        b.legend()
        return {ctx.savefig(fig, "similarity.png"): "Left: mean cosine of the residual stream entering and leaving "
                "each layer. Right: attention entropy of each row divided by log of its number of keys "
                "(1 = uniform over the prefix), per head (dots) and mean over heads."}


def random_mean_abs_cos(d: int) -> float:
    """E|cos| of two independent Gaussian vectors in R^d: Γ(d/2) / (√π Γ((d+1)/2)) ≈ sqrt(2 / (π d))."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@register
class OrthogonalityProbe(Probe):
    """Per layer: cosines between hidden vectors of distinct tokens vs random vectors (JoMA's assumption)."""

    decides_on_short_texts = True  # |cos| between embeddings (weights): a short text's tokens give hundreds of pairs

    name = "orthogonality"
    needs = ("embed", "blocks.*.resid_post")
    summary = "JoMA's orthogonal embeddings: pairwise cosine of distinct tokens' hidden vectors vs random"

    # baseline: random pairs whose cosines are the yardstick (their spread needs two)
    bounds = {"pairs": ">= 1", "max_pairs": ">= 1", "baseline": ">= 2", "factor": "> 0", "seed": ">= 0"}

    def __init__(self, pairs: int = 512, max_pairs: int = 16384, baseline: int = 4096, factor: float = 2.0,
                 seed: int = 0):
        check_bounds(self, locals())
        self.per_chunk, self.max_pairs, self.baseline, self.factor, self.seed = pairs, max_pairs, baseline, factor, seed

    def attach(self, model, ids) -> None:
        if ids.numel() < 3:
            raise UsageError(f"the orthogonality probe needs at least 3 tokens (position 0 is left out); "
                             f"got {ids.numel()}")
        d = arch.dims(model)
        self.d, self.ids = d.d_model, ids.cpu()
        self.names = ["embed"] + [f"blocks.{i}.resid_post" for i in range(d.n_layers)]
        self.cosines: list[list[torch.Tensor]] = [[] for _ in self.names]  # per layer, per chunk (m,)
        self.centred: list[list[torch.Tensor]] = [[] for _ in self.names]  # the same pairs, chunk mean removed
        self.pairs: list[torch.Tensor] = []  # per chunk (m, 2) absolute positions, the same for every layer
        self.gen = torch.Generator().manual_seed(self.seed)
        self._chunk, self._lo, self._rel = -1, 0, torch.zeros(0, 2, dtype=torch.long)

    def _draw(self, start: int, t: int) -> None:
        """This chunk's pairs: distinct positions, never position 0 (the sink), never the same token id."""
        self._chunk, self._lo = start, 1 if start == 0 else 0
        m, lo = min(self.per_chunk, self.max_pairs - sum(len(p) for p in self.pairs)), self._lo
        if m <= 0 or t - lo < 2:
            self._rel = torch.zeros(0, 2, dtype=torch.long)
            return
        cand = torch.randint(lo, t, (4 * m, 2), generator=self.gen)  # (4m, 2) within the chunk
        ids = self.ids[start + cand]  # (4m, 2)
        keep = (cand[:, 0] != cand[:, 1]) & (ids[:, 0] != ids[:, 1])
        self._rel = cand[keep][:m]  # (m', 2)
        self.pairs.append(self._rel + start)

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        if start != self._chunk:  # the chunk's first hook (embed): draw its pairs
            self._draw(start, t.shape[1])
        if not len(self._rel):
            return
        x = t[0].double()  # (t, d)
        layer = 0 if name == "embed" else layer_of(name) + 1
        for out, v in ((self.cosines, x), (self.centred, x - x[self._lo:].mean(0))):
            cos = torch.nn.functional.cosine_similarity(v[self._rel[:, 0]], v[self._rel[:, 1]], dim=-1)  # (m,)
            out[layer].append(cos.float())

    def random_cosines(self) -> torch.Tensor:
        """(baseline,) cosines of pairs of independent Gaussian vectors in R^d (seeded, in batches)."""
        gen, out = torch.Generator().manual_seed(self.seed + 1), []
        for s in range(0, self.baseline, 1024):  # batches: 4096 pairs at once would be 38 MB for d = 576
            g = torch.randn(min(1024, self.baseline - s), 2, self.d, generator=gen, dtype=torch.float64)  # (n, 2, d)
            out.append(torch.nn.functional.cosine_similarity(g[:, 0], g[:, 1], dim=-1).float())
        return torch.cat(out)

    @staticmethod
    def _summary(cos: torch.Tensor) -> dict:
        q = torch.tensor(QUANTILES)
        return {"mean_cos": float(cos.mean()), "mean_abs_cos": float(cos.abs().mean()),
                "quantiles_cos": torch.quantile(cos, q).tolist(),
                "quantiles_abs_cos": torch.quantile(cos.abs(), q).tolist()}

    def result(self) -> dict:
        if not self.pairs:
            raise UsageError("the orthogonality probe found no pair of distinct tokens outside position 0: give a "
                             "longer text")
        baseline = self.random_cosines()
        rand = {**self._summary(baseline), "std_cos": float(baseline.std()),
                "exact_mean_abs_cos": random_mean_abs_cos(self.d)}
        out = {"layers": self.names, "d_model": self.d, "pairs": int(sum(len(p) for p in self.pairs)),
               "quantiles": list(QUANTILES), "random": rand, "factor": self.factor}
        for suffix, cosines in (("", self.cosines), ("_centred", self.centred)):
            layers = [self._summary(torch.cat(c).cpu()) for c in cosines]
            ratio = [s["mean_abs_cos"] / rand["mean_abs_cos"] for s in layers]
            out.update({k + suffix: [s[k] for s in layers] for k in layers[0]})
            out.update({"ratio" + suffix: ratio, "orthogonal" + suffix: [r <= self.factor for r in ratio]})
        return out

    def claims(self, metrics: dict) -> list:
        return [check(f"JoMA's nearly orthogonal token embeddings: mean |cos| between distinct tokens' embeddings "
                      f"within {self.factor:g}x of random Gaussian vectors in R^{metrics['d_model']} (ratio)",
                      metrics["ratio"][0], self.factor, 0.0, "at_most"),
                finding(f"share of layers (embeddings and {len(metrics['layers']) - 1} block outputs) whose hidden "
                        f"vectors of distinct tokens are within {self.factor:g}x of random",
                        sum(metrics["orthogonal"]) / len(metrics["orthogonal"])),
                finding("the same with each chunk's mean hidden vector removed first (centred; added after the "
                        "first run)", sum(metrics["orthogonal_centred"]) / len(metrics["orthogonal_centred"]))]

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        from attnlab.core.plotting import plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        x = range(len(metrics["layers"]))
        q = metrics["quantiles"]
        lo, hi = (torch.tensor(metrics["quantiles_abs_cos"])[:, q.index(p)] for p in (0.25, 0.75))
        ax.fill_between(x, lo, hi, alpha=0.25, label="|cos| 25-75%")
        ax.plot(x, metrics["mean_abs_cos"], marker="o", label="mean |cos|, distinct tokens")
        ax.plot(x, metrics["mean_abs_cos_centred"], marker="s", ls="--", label="the same, centred")
        r = metrics["random"]["mean_abs_cos"]
        ax.axhspan(r, self.factor * r, color="grey", alpha=0.3, label=f"random .. {self.factor:g}x random")
        ax.set(yscale="log", xlabel="layer (0 = token embeddings, i = after block i - 1)", ylabel="|cos|",
               title=f"JoMA's orthogonality: hidden vectors of distinct tokens (d = {metrics['d_model']})")
        ax.legend(fontsize=8)
        return {ctx.savefig(fig, "orthogonality.png"): "Mean |cos| between the hidden vectors of sampled pairs of "
                "distinct tokens (position 0 left out) per layer, with their 25-75% band, and the same with each "
                "chunk's mean hidden vector removed (centred), against random Gaussian vectors of the same width "
                "(grey: from their mean |cos| to the criterion's multiple of it)."}
