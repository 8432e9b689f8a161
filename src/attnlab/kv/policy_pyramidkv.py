"""PyramidKV (Cai et al. 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
Funneling"): lower layers attend broadly, upper layers to a few tokens, so the budget is spread over the layers
as a pyramid -- the top layer keeps ``budget / beta``, the bottom ``2 * budget - budget / beta``, the layers
between on the straight line, so that their mean is the budget. Within a layer any scorer chooses the tokens
(``scorer``: SnapKV's, as the paper; H2O's, TOVA's, ...), at its defaults.

A share of the context whose bottom layer would pass the whole context keeps the whole context there and
``2 * budget - 1`` at the top, as kvpress's PyramidKVPress clips it; a token budget whose top layer falls below
what the scorer must keep is the same in every layer, as kvpress falls back to SnapKV. A token budget is
spread as it is: its bottom layers may hold more than a short context has (at a ratio of 0 the pyramid still
evicts in the top layers; give the budget as a share to clip it).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnlab.experiments.command import option
from attnlab.kv.policies import KVPolicy, OverScorer, make_policy, register


@register
@dataclass(frozen=True)
class PyramidKV(OverScorer):
    beta: float = option(20.0, "the pyramid's steepness: the top layer keeps budget/beta", bounds=">= 1")
    name = "pyramidkv"
    about = "PyramidKV: a budget decreasing from the bottom layer to the top, each layer choosing by a scorer"

    def layer_budget(self, layer: int, n_layers: int) -> float | None:
        """Layer ``layer``'s budget: tokens, or a share of those seen (None: the whole context)."""
        b = self.budget
        top = b / self.beta
        bottom = 2 * b - top
        fraction = isinstance(b, float) and b < 1
        if fraction and bottom > 1:  # the bottom layer keeps the whole context, the top what keeps the mean b
            bottom, top = 1.0, 2 * b - 1
        if n_layers < 2 or (not fraction and top < self.reserved() + 1):
            return b  # no pyramid fits: every layer keeps the budget
        value = bottom - layer * (bottom - top) / (n_layers - 1)
        return None if fraction and value >= 1 else value if fraction else max(self.reserved() + 1, round(value))

    def for_layer(self, layer: int, n_layers: int) -> KVPolicy:
        budget = self.layer_budget(layer, n_layers)
        return make_policy("full") if budget is None else self.scorer_at(budget)

    def describe(self) -> str:
        return f"pyramidkv({self.scorer}, budget={self.budget}, beta={self.beta:g})"

    def label(self) -> str:
        return f"pyramidkv {self.budget} ({self.scorer})"
