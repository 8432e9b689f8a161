"""SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation"): the latest
``window`` queries -- the observation window -- say what matters. A slot's score is their mean attention to it,
averaged over the query heads that share its KV head, then smoothed by an average pool over ``kernel``
neighbouring slots in stream order (a token is kept with its neighbours, so a kept phrase stays whole); the
window's own tokens are always kept.

The paper, and kvpress's SnapKVPress, select once, after the prompt. Here each slot keeps the attention of the
last ``window`` queries apart (a ring of ``window`` numbers per slot), so the selection is made again at every
eviction as decoding goes on: decode-time SnapKV. Streamed in chunks of ``window`` tokens or more, each choice
is the paper's, on that chunk's last ``window`` queries. A budget at or below the window keeps the latest
``budget - 1`` tokens as the window, so a small budget still evicts by score.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.kv.policies import KEEP, KVPolicy, SlotState, register


def pooled_in_stream_order(score: torch.Tensor, pos: torch.Tensor, kernel: int) -> torch.Tensor:
    """score (B, H, S) averaged over ``kernel`` neighbours, neighbours by stream index (``pos`` (B, H, S)), not
    by slot: after eviction the slots are unordered. Zero padding at the ends, as SnapKV's pool."""
    if kernel == 1:
        return score
    order = pos.argsort(-1)  # (B, H, S): slots in stream order
    b, h, s = score.shape
    ranked = score.gather(-1, order).reshape(b * h, 1, s)
    smooth = F.avg_pool1d(ranked, kernel, stride=1, padding=kernel // 2).view(b, h, s)
    return torch.empty_like(smooth).scatter_(-1, order, smooth)


@register
@dataclass(frozen=True)
class SnapKV(KVPolicy):
    window: int = option(32, "observation window: the latest queries whose attention scores the slots (their "
                             "own tokens are kept)", bounds=">= 1")
    kernel: int = option(5, "average pool over this many neighbouring slots in stream order (odd; 1: none)",
                         bounds=">= 1")
    needs_scores = True
    scored = True
    name = "snapkv"
    about = "SnapKV: the tokens the latest queries attend to most, pooled, and those queries' own tokens"

    def __post_init__(self):
        if self.kernel % 2 == 0:
            raise UsageError(f"snapkv kernel={self.kernel}: give an odd width (the pool is centred), e.g. 5")

    def n_recent(self, capacity: int) -> int:
        return min(self.window, capacity - 1)  # the window, less one slot for a scored token

    def score_slots(self) -> tuple[int, ...]:
        return (self.window,)

    def fold(self, score: torch.Tensor, probs: torch.Tensor) -> None:
        """score (B, H, S, w): slot j's attention from each of the last w queries, oldest first; probs
        (B, H, g, q, S) this step's, its q queries' averaged over the group's g heads and shifted in."""
        q = probs.shape[3]
        step = probs.mean(2).transpose(-1, -2)  # (B, H, S, q)
        if q >= self.window:
            score.copy_(step[..., -self.window:])
        else:
            score[..., :-q] = score[..., q:].clone()
            score[..., -q:] = step

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        cap = self.capacity(s.seen) or s.pos.shape[-1]
        window = s.pos >= s.seen - self.n_recent(cap)  # (B, H, S): the observation window's own tokens
        # the window's slots count as zeros in the pool, as SnapKV pools only the keys before the window
        pooled = pooled_in_stream_order(s.score.mean(-1).masked_fill(window, 0.0), s.pos, self.kernel)
        return pooled.masked_fill(window, KEEP)

    def label(self) -> str:
        return f"snapkv {self.budget} (window {self.window})"
