"""How alike neighbouring layers and neighbouring tokens are in a dense model: Deja Vu's "slowly
changing embeddings" (cross-layer cosine of the residual stream) and the overlap of consecutive tokens'
oracle sets, and the two with perplexity from one traced pass (``dense_stats``). Windows as in
``measure.py``: each its own forward from position 0, statistics accumulated as they go.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from attnlab.core.metrics import CosineSums, follow
from attnlab.evals.longppl import scored_nll
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.measure import spans, traced_windows
from attnlab.sparsity.rules import topk_mask


# --------------------------------------------------------------------------- slowly changing embeddings
class Cosines(NamedTuple):
    """Mean cosine similarity of the residual stream across each layer, over tokens.

    ``layer[i]`` = cos(resid_pre_i, resid_post_i). Layer i's input is layer i-1's output, so for
    i >= 1 this is also Deja Vu's consecutive-layer cosine cos(resid_post_{i-1}, resid_post_i):
    ``between`` = ``layer[1:]`` (L-1,)."""

    layer: torch.Tensor  # (L,)

    @property
    def between(self) -> torch.Tensor:
        return self.layer[1:]


class _CosineSums:
    """cross_layer_cosine's trace reading: each traced window's residual stream, layer by layer, into
    the shared running sums (``attnlab.core.metrics.CosineSums``; the probes add up the same ones)."""

    names = ["blocks.0.resid_pre", "blocks.*.resid_post"]

    def __init__(self, n: int):
        self.sums = CosineSums(n)

    def add(self, tr: Trace) -> None:
        prev = tr["blocks.0.resid_pre"][0]  # (W, d)
        for i in range(self.sums.n):
            post = tr[f"blocks.{i}.resid_post"][0]  # (W, d)
            self.sums.add(i, prev, post)
            prev = post

    def result(self) -> Cosines:
        return Cosines(self.sums.mean())


def cross_layer_cosine(model, ids: torch.Tensor, window: int = 512, progress=None) -> Cosines:
    """Deja Vu's "slowly changing embeddings": per layer, the mean over tokens of the cosine between the
    residual stream entering and leaving it."""
    sums = _CosineSums(arch.dims(model).n_layers)
    for tr in traced_windows(model, ids, sums.names, window, progress):
        sums.add(tr)
    return sums.result()


# --------------------------------------------------------------------------- consecutive tokens
class _OverlapSums:
    """consecutive_overlap's running sums at one keep, one traced window at a time."""

    names = ["blocks.*.mlp.post"]

    def __init__(self, n: int, keep: float):
        self.n, self.keep, self.sums, self.pairs = n, keep, torch.zeros(n, dtype=torch.float64), 0

    def add(self, tr: Trace) -> None:
        for i in range(self.n):
            m = topk_mask(tr[f"blocks.{i}.mlp.post"][0].abs(), self.keep)  # (W, d_ff) bool
            shared = (m[1:] & m[:-1]).sum(-1).double() / m[:-1].sum(-1).double()  # (W - 1,)
            self.sums, = follow(shared, self.sums)
            self.sums[i] += shared.sum()
        self.pairs += m.shape[0] - 1

    def result(self) -> torch.Tensor:
        return (self.sums / max(self.pairs, 1)).float().cpu()


def consecutive_overlap(model, ids: torch.Tensor, keep: float, window: int = 512, progress=None) -> torch.Tensor:
    """(L,) per layer, the mean share of token t's oracle set (top ``keep`` of |h|) that is also in token
    t+1's: what an active-set cache could reuse. Two random sets of the same size share ``keep`` of it."""
    sums = _OverlapSums(arch.dims(model).n_layers, keep)
    for tr in traced_windows(model, ids, sums.names, window, progress):
        sums.add(tr)
    return sums.result()


# --------------------------------------------------------------------------- all three in one dense pass
class DenseStats(NamedTuple):
    ppl: float  # perplexity(model, ids, window)
    cosine: Cosines  # cross_layer_cosine(model, ids, window)
    overlap: dict[float, torch.Tensor]  # keep -> consecutive_overlap(model, ids, keep, window) (L,)


@torch.no_grad()
def dense_stats(model, ids: torch.Tensor, keeps: tuple[float, ...], window: int = 512, progress=None) -> DenseStats:
    """Perplexity, cross-layer cosine and consecutive-token overlap at each of ``keeps`` from one traced
    forward per window instead of three: the same windows, forwards and sums as the three functions, so
    the same numbers. (The trace only reads; the logits of the scored rows only are computed.)"""
    n = arch.dims(model).n_layers
    device = next(model.parameters()).device
    cos, overlap = _CosineSums(n), {k: _OverlapSums(n, k) for k in keeps}
    total, count = 0.0, 0
    with Trace(model, _CosineSums.names + _OverlapSums.names) as tr:
        for start, first, end in spans(ids.numel(), window):
            if end - first < 1:  # a one-token window: nothing to score, still traced (as in traced_windows)
                model(ids[None, start:end].to(device), use_cache=False)
            else:
                nll = scored_nll(model, ids[start:end], torch.arange(first - start, end - start))  # (end - first,)
                total, count = total + float(nll.sum()), count + nll.numel()
            for sums in (cos, *overlap.values()):
                sums.add(tr)
            if progress is not None:
                progress.update(end - start)
    if not count:
        raise ValueError(f"perplexity needs at least 2 tokens in a window; got {ids.numel()} tokens")
    return DenseStats(math.exp(total / count), cos.result(), {k: o.result() for k, o in overlap.items()})
