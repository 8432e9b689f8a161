"""Long-context perplexity by sliding windows (stride 256), at several context lengths at once.

The protocol (PI, YaRN): at context length C, windows of C tokens slide over the document by
``stride``; each window scores its last ``stride`` tokens, so every scored token sees between
C − stride and C tokens of context. A model is causal, so the NLL of the token at window position
p does not depend on the tokens after it: one forward over C_max tokens from offset o gives, for
every C ≤ C_max, exactly the scores of the window (o, C) — tokens o + C − stride … o + C − 1.
One prefill per offset thus serves every length. (Dynamic NTK is the exception: its frequencies
depend on the forward's length, so it gets one forward per length.)

Offsets step by ``stride`` from the document's start, as in the protocol; ``windows`` caps how
many are used (evenly spaced among them) when the full protocol is too slow for the machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.errors import UsageError


@dataclass
class LongPPL:
    lengths: list[int]
    nll: dict[int, list[float]]  # context length -> mean NLL of each window's scored tokens

    def ppl(self, length: int) -> float:
        return math.exp(float(np.mean(self.nll[length])))


def window_offsets(n_tokens: int, max_len: int, stride: int, windows: int | None) -> list[int]:
    offsets = list(range(0, n_tokens - max_len + 1, stride))
    if not offsets:
        raise UsageError(f"the text has {n_tokens} tokens, fewer than the longest context {max_len}: "
                         "use a longer --text or shorter --lengths")
    if windows is not None and windows < len(offsets):
        offsets = [offsets[i] for i in np.linspace(0, len(offsets) - 1, windows).round().astype(int)]
    return offsets


@torch.no_grad()
def scored_nll(model, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """ids (T,), positions (P,) sorted in [1, T): (P,) float64 NLL of each token at ``positions``
    given all tokens before it, one forward. Only those P rows of logits are computed (a 16k-token
    forward with every row would hold 16k × vocab floats)."""
    device = next(model.parameters()).device
    logits = model(ids[None].to(device), logits_to_keep=(positions - 1).to(device),
                   use_cache=False).logits[0].float()  # (P, V)
    return -F.log_softmax(logits, -1).gather(-1, ids[positions, None].to(device))[:, 0].double().cpu()


def long_ppl(model, ids: torch.Tensor, lengths: list[int], stride: int = 256, windows: int | None = None,
             per_length_forward: bool = False, progress=None) -> LongPPL:
    """Sliding-window perplexity of ``ids`` (T,) at each context length in ``lengths``."""
    lengths = sorted(lengths)
    if lengths[0] < stride:
        raise UsageError(f"context length {lengths[0]} is shorter than the stride {stride}")
    offsets = window_offsets(ids.numel(), lengths[-1], stride, windows)
    scored = {n: torch.arange(n - stride, n) for n in lengths}  # window positions each length scores
    nll: dict[int, list[float]] = {n: [] for n in lengths}
    for o in offsets:
        if per_length_forward:
            for n in lengths:
                nll[n].append(float(scored_nll(model, ids[o:o + n], scored[n]).mean()))
        else:
            union = torch.unique(torch.cat(list(scored.values())))  # sorted
            per_pos = dict(zip(union.tolist(), scored_nll(model, ids[o:o + lengths[-1]], union).tolist()))
            for n in lengths:
                nll[n].append(float(np.mean([per_pos[p] for p in scored[n].tolist()])))
        if progress is not None:
            progress.update(1)
    return LongPPL(lengths, nll)
