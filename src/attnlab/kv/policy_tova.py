"""TOVA (Oren et al. 2024, "Transformers are Multi-State RNNs"): keep the tokens the current query attends
to most. At each step every slot's score is the attention the step's last query gives it -- not a sum over
the stream, as H2O's -- so a token stays only while the present still reads it. No sinks, no recent window:
the rule alone decides (the first token survives because queries keep attending to it).

The paper averages the scores over a layer's heads, so every head keeps the same tokens (``heads=mean``);
``heads=each`` lets every KV head keep its own, from the mean over its group's query heads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.kv.policies import KVPolicy, SlotState, register

HEADS = ("mean", "each")


@register
@dataclass(frozen=True)
class TOVA(KVPolicy):
    heads: str = option("mean", "how heads are reduced: mean (one choice per layer, as the paper) or each (every "
                                "KV head its own)")
    needs_scores = True
    scored = True
    name = "tova"
    about = "TOVA: the tokens the current query attends to most (Oren et al. 2024)"

    def __post_init__(self):
        if self.heads not in HEADS:
            raise UsageError(f"tova heads={self.heads}: choose {' or '.join(HEADS)}")

    def received(self, probs: torch.Tensor) -> torch.Tensor:  # (B, H, g, q, S) -> (B, H, S)
        last = probs[:, :, :, -1].mean(2)  # the step's last query, averaged over the group's query heads
        return last.mean(1, keepdim=True).expand_as(last) if self.heads == "mean" else last

    def n_recent(self, capacity: int) -> int:
        return 0  # no window kept for recency alone: the rule decides every slot

    def accumulates(self) -> bool:
        return False  # this step's attention only

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        return s.score

    def label(self) -> str:
        return f"tova {self.budget}" + ("" if self.heads == "mean" else " (each head)")
