"""Ada-KV (Feng et al. 2024, "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation for Efficient LLM
Inference"): a layer's budget is shared out over its KV heads by their scores, not split evenly -- the layer keeps
its ``budget * H`` highest-scored slots wherever they are, so a head whose attention is spread keeps more and a
peaked one fewer. Each head first keeps the top ``alpha`` share of an even split (Ada-KV's safeguard, as kvpress's
AdaKVPress: 0.2). The scores are any scorer's (``scorer``: SnapKV's by default, as the paper pairs them).

The stored tensors keep one length for every head, so a head below the longest share holds its extra slots
masked (as kvpress masks them): the attention never reads them, and the next eviction drops them first. Each
eviction shares the budget again, so decoding evicts through the full rule at every step; positions stay the
tokens' own (rolling positions are refused: a masked slot has no rank).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.kv.policies import POLICIES, OverScorer, register


@register
@dataclass(frozen=True)
class AdaKV(OverScorer):
    alpha: float = option(0.2, "the share of an even split every head keeps whatever its scores", bounds="[0, 1]")
    name = "adakv"
    about = "Ada-KV: a layer's budget shared out over its KV heads by their scores (SnapKV's by default)"

    def __post_init__(self):
        super().__post_init__()
        if not POLICIES.get(self.scorer).scored:  # the heads compete by their scores: each head must have its own
            raise UsageError(f"adakv scorer={self.scorer}: give a policy that scores each head's slots, e.g. snapkv, "
                             "h2o, tova, keydiff")

    def shares_budget(self) -> bool:
        return True

    def allocate(self, priority: torch.Tensor, keep: int) -> torch.Tensor:  # (B, H, S) -> (B, H, S) bool
        b, h, s = priority.shape
        floor = min(keep, int(self.alpha * keep))
        safe = torch.zeros_like(priority, dtype=torch.bool)
        if floor:
            safe.scatter_(-1, priority.topk(floor, dim=-1).indices, True)  # each head's own first share
        ranked = priority.masked_fill(safe, float("inf")).flatten(1)  # (B, H*S): the heads compete
        visible = torch.zeros_like(ranked, dtype=torch.bool)
        visible.scatter_(-1, ranked.topk(keep * h, dim=-1).indices, True)
        return visible.view(b, h, s) & (priority > float("-inf"))  # a masked slot is never shown again

    def describe(self) -> str:
        return f"adakv({self.scorer}, budget={self.budget}, alpha={self.alpha:g})"

    def label(self) -> str:
        return f"adakv {self.budget} ({self.scorer})"
