"""Long-context perplexity by sliding windows (stride 256), at several context lengths.

The protocol (PI, YaRN): at context length C, windows of C tokens slide over the document by
``stride``; each window scores its last ``stride`` tokens, so every scored token sees between
C − stride and C tokens of context, and over the whole document every length scores the same
tokens. When only a few windows can be afforded (a 16k-token forward takes a minute on a 2-core
CPU), they are taken *aligned by their end*: the window of length C ending at e scores tokens
e − stride … e − 1 for every C, so the lengths are compared on the same tokens — otherwise a
difference in PPL between lengths would partly be a difference in text. Ends step by ``stride``
from the longest length on; ``windows`` keeps that many of them, evenly spaced (None: all, the
full protocol). Each (end, length) is one forward that computes logits only at the scored rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.core.errors import UsageError


@dataclass
class LongPPL:
    lengths: list[int]
    nll: dict[int, list[float]]  # context length -> mean NLL of each window's scored tokens

    def ppl(self, length: int) -> float:
        return math.exp(float(np.mean(self.nll[length])))


def window_ends(n_tokens: int, max_len: int, stride: int, windows: int | None) -> list[int]:
    """Where the scored blocks end: every stride from the longest length on, or ``windows`` of them."""
    ends = list(range(max_len, n_tokens + 1, stride))
    if not ends:
        raise UsageError(f"the text has {n_tokens} tokens, fewer than the longest context {max_len}: "
                         "use a longer --text or shorter --lengths")
    if windows is not None and windows < len(ends):
        ends = [ends[i] for i in np.linspace(0, len(ends) - 1, windows).round().astype(int)]
    return ends


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
             progress=None) -> LongPPL:
    """Sliding-window perplexity of ``ids`` (T,) at each context length in ``lengths``."""
    lengths = sorted(lengths)
    if lengths[0] <= stride:  # else a window's first token would be scored with no token before it
        raise UsageError(f"context length {lengths[0]} is not longer than the stride {stride}: every scored token "
                         "needs a token before it in its window")
    nll: dict[int, list[float]] = {n: [] for n in lengths}
    for e in window_ends(ids.numel(), lengths[-1], stride, windows):
        for n in lengths:  # the window of length n ending at e: the same scored tokens for every n
            nll[n].append(float(scored_nll(model, ids[e - n:e], torch.arange(n - stride, n)).mean()))
            if progress is not None:
                progress.update(1)
    return LongPPL(lengths, nll)
