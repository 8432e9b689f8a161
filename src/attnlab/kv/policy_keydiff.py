"""KeyDiff (Park et al. 2025, "KeyDiff: Key Similarity-Based KV Cache Eviction for Long-Context LLM Inference in
Resource-Constrained Environments"): per layer and KV head, keep the tokens whose keys point away from the
others' -- the lowest cosine similarity to the mean key direction (the mean of the unit keys). No attention is
read, so it runs with any attention kernel; no sinks or recent window are protected, as in kvpress's
KeyDiffPress. The keys are the stored, post-RoPE ones (re-rotated with rolling positions); padding keys are
left out of the mean.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.kv.policies import KVPolicy, SlotState, register


@register
@dataclass(frozen=True)
class KeyDiff(KVPolicy):
    scored = True
    reads_keys = True
    name = "keydiff"
    about = "KeyDiff: the tokens whose keys differ most from the mean key direction, per KV head"

    def n_recent(self, capacity: int) -> int:
        return 0  # the rule decides every slot

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        at = torch.promote_types(s.keys.dtype, torch.float32)
        unit = F.normalize(s.keys.to(at), dim=-1)  # (B, H, S, D)
        real = (s.pos >= s.first).unsqueeze(-1)  # (B, H, S, 1): left padding stays out of the anchor
        anchor = (unit * real).sum(2, keepdim=True) / real.sum(2, keepdim=True).clamp(min=1)  # (B, H, 1, D)
        return -F.cosine_similarity(unit, anchor, dim=-1)
