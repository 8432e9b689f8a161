"""Language-model batches: the PyTorch tutorial's bptt scheme and random windows.

bptt (the tutorial's, used by the Scan&Snap/JoMA authors): the token stream is cut into B
parallel streams (columns), and minibatch i is rows [i, i + bptt) with targets shifted by one.
Random windows: B windows of length T+1 drawn uniformly from the stream.
"""
from __future__ import annotations

import torch

from attnlab.core.errors import UsageError


def batchify(ids: torch.Tensor, streams: int) -> torch.Tensor:
    """(N,) token ids -> (N // streams, streams): stream b is a contiguous slice, the tail dropped."""
    n = ids.numel() // streams
    if n < 2:
        raise UsageError(f"{ids.numel()} tokens cannot fill {streams} streams of at least 2 tokens: "
                         "use fewer streams or more text")
    return ids[: n * streams].view(streams, n).t().contiguous()


def bptt_batches(source: torch.Tensor, bptt: int):
    """Yield (x, y), each (B, T): inputs and next-token targets, T = bptt except at the end.

    source: (L, B) from :func:`batchify`. Refuses a bptt longer than the data."""
    if bptt < 1 or bptt > source.shape[0] - 1:
        raise UsageError(f"bptt={bptt} but each stream holds {source.shape[0]} tokens: "
                         f"use 1 <= bptt <= {source.shape[0] - 1} or more text")
    for i in range(0, source.shape[0] - 1, bptt):
        t = min(bptt, source.shape[0] - 1 - i)
        yield source[i : i + t].t(), source[i + 1 : i + 1 + t].t()


def random_windows(ids: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """B windows of ``length`` inputs and their shifted targets. ids: (N,) -> (B, T), (B, T)."""
    if length < 1 or length + 1 > ids.numel():
        raise UsageError(f"window length {length} needs at least {length + 1} tokens, the data has {ids.numel()}")
    start = torch.randint(0, ids.numel() - length, (batch,), generator=gen)
    idx = start[:, None] + torch.arange(length + 1)  # (B, T + 1)
    w = ids[idx]
    return w[:, :-1], w[:, 1:]
