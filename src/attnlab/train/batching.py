"""Language-model batches: the PyTorch tutorial's bptt scheme and random windows, as batchers.

bptt (the tutorial's, used by the Scan&Snap/JoMA authors): the token stream is cut into B
parallel streams (columns), and minibatch i is rows [i, i + bptt) with targets shifted by one.
Random windows: B windows of length T+1 drawn uniformly from the stream.

A :class:`Batcher` is everything the trainer needs from a scheme: the prepared source of a split,
training minibatch ``step``, the validation minibatches, and the fixed probe minibatch. The
trainer picks one by name from :data:`BATCHERS` once, so it never branches on the scheme.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator, Protocol

import torch

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry

Batch = tuple[torch.Tensor, torch.Tensor]  # inputs and next-token targets, each (B, T)


def batchify(ids: torch.Tensor, streams: int) -> torch.Tensor:
    """(N,) token ids -> (N // streams, streams): stream b is a contiguous slice, the tail dropped."""
    n = ids.numel() // streams
    if n < 2:
        raise UsageError(f"{ids.numel()} tokens cannot fill {streams} streams of at least 2 tokens: "
                         "use fewer streams or more text")
    return ids[: n * streams].view(streams, n).t().contiguous()


def bptt_batches(source: torch.Tensor, bptt: int) -> Iterator[Batch]:
    """Yield (x, y), each (B, T): inputs and next-token targets, T = bptt except at the end.

    source: (L, B) from :func:`batchify`. Refuses a bptt longer than the data."""
    if bptt < 1 or bptt > source.shape[0] - 1:
        raise UsageError(f"bptt={bptt} but each stream holds {source.shape[0]} tokens: "
                         f"use 1 <= bptt <= {source.shape[0] - 1} or more text")
    for i in range(0, source.shape[0] - 1, bptt):
        yield _window(source, i, bptt)


def _window(source: torch.Tensor, i: int, bptt: int) -> Batch:
    """The (x, y) pair starting at row i of source (L, B): (B, T) each, T = bptt except at the end."""
    t = min(bptt, source.shape[0] - 1 - i)
    return source[i : i + t].t(), source[i + 1 : i + 1 + t].t()


def random_windows(ids: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> Batch:
    """B windows of ``length`` inputs and their shifted targets. ids: (N,) -> (B, T), (B, T)."""
    if length < 1 or length + 1 > ids.numel():
        raise UsageError(f"window length {length} needs at least {length + 1} tokens, the data has {ids.numel()}")
    start = torch.randint(0, ids.numel() - length, (batch,), generator=gen)
    idx = start[:, None] + torch.arange(length + 1)  # (B, T + 1)
    w = ids[idx]
    return w[:, :-1], w[:, 1:]


class Batcher(Protocol):
    """A batching scheme for ``batch_size`` sequences of ``bptt`` tokens. ``source`` is what
    :meth:`prepare` returned for the split."""

    batch_size: int
    bptt: int

    def prepare(self, ids: torch.Tensor, split: str) -> torch.Tensor:
        """(N,) token ids of ``split`` -> the source the other methods read; UsageError if too short."""

    def batch(self, source: torch.Tensor, step: int, gen: torch.Generator) -> Batch:
        """Training minibatch ``step`` (0-based); a random scheme draws from ``gen``."""

    def eval_batches(self, source: torch.Tensor, limit: int) -> Iterator[Batch]:
        """The validation minibatches, the same at every evaluation; at most ``limit`` (0: the default)."""

    def probe(self, source: torch.Tensor) -> torch.Tensor:
        """The fixed minibatch attention is measured on: the first ``bptt`` tokens. -> (B', T)"""


@dataclass(frozen=True)
class BPTT:
    """The tutorial's parallel streams: source (L, B); epoch after epoch through the rows."""

    batch_size: int
    bptt: int

    def prepare(self, ids: torch.Tensor, split: str) -> torch.Tensor:
        src = batchify(ids, self.batch_size)  # (L, B)
        if self.bptt > src.shape[0] - 1:
            raise UsageError(f"bptt={self.bptt} is longer than the {split} data allows ({src.shape[0]} tokens per "
                             f"stream with batch_size={self.batch_size}): lower bptt or batch_size, or give more text")
        return src

    def batch(self, source: torch.Tensor, step: int, gen: torch.Generator) -> Batch:
        n = (source.shape[0] - 2) // self.bptt + 1  # minibatches per epoch
        return _window(source, (step % n) * self.bptt, self.bptt)

    def eval_batches(self, source: torch.Tensor, limit: int) -> Iterator[Batch]:
        return itertools.islice(bptt_batches(source, self.bptt), limit or None)  # 0: the whole split

    def probe(self, source: torch.Tensor) -> torch.Tensor:
        return source[: self.bptt].t()  # (B, T)


@dataclass(frozen=True)
class RandomWindows:
    """Windows at uniform random offsets: source (N,); training draws from the trainer's generator."""

    batch_size: int
    bptt: int
    eval_seed: int = 12345  # a generator of its own, so every evaluation sees the same windows
    eval_default: int = 50  # windows per evaluation when no limit is given

    def prepare(self, ids: torch.Tensor, split: str) -> torch.Tensor:
        if ids.numel() < self.bptt + 1:
            raise UsageError(f"the {split} split has {ids.numel()} tokens, fewer than bptt+1={self.bptt + 1}")
        return ids

    def batch(self, source: torch.Tensor, step: int, gen: torch.Generator) -> Batch:
        return random_windows(source, self.batch_size, self.bptt, gen)

    def eval_batches(self, source: torch.Tensor, limit: int) -> Iterator[Batch]:
        g = torch.Generator().manual_seed(self.eval_seed)
        return (random_windows(source, self.batch_size, self.bptt, g) for _ in range(limit or self.eval_default))

    def probe(self, source: torch.Tensor) -> torch.Tensor:
        return source[: self.bptt].view(1, -1)  # (1, T)


def prepend(x: torch.Tensor, token: int) -> torch.Tensor:
    """x (B, T) -> (B, T+1), every row led by ``token``."""
    return torch.cat([torch.full_like(x[:, :1], token), x], 1)


@dataclass(frozen=True)
class PrependSink:
    """Another batcher's batches with a learnable sink token before every sample (StreamingLLM's
    pre-training): inputs (B, T) -> (B, T+1) starting with ``sink``; targets gain the first input token,
    the one the sink position predicts. Everything else is the inner batcher's."""

    inner: Batcher
    sink: int

    @property
    def batch_size(self) -> int:
        return self.inner.batch_size

    @property
    def bptt(self) -> int:
        return self.inner.bptt

    def prepare(self, ids: torch.Tensor, split: str) -> torch.Tensor:
        return self.inner.prepare(ids, split)

    def _with_sink(self, xy: Batch) -> Batch:
        x, y = xy  # each (B, T)
        return prepend(x, self.sink), torch.cat([x[:, :1], y], 1)  # each (B, T+1)

    def batch(self, source: torch.Tensor, step: int, gen: torch.Generator) -> Batch:
        return self._with_sink(self.inner.batch(source, step, gen))

    def eval_batches(self, source: torch.Tensor, limit: int) -> Iterator[Batch]:
        return map(self._with_sink, self.inner.eval_batches(source, limit))

    def probe(self, source: torch.Tensor) -> torch.Tensor:
        return prepend(self.inner.probe(source), self.sink)  # (B', T+1)


BATCHERS: Registry[type] = Registry("batching")
BATCHERS.add("bptt", BPTT)
BATCHERS.add("random", RandomWindows)


def make_batcher(name: str, batch_size: int, bptt: int) -> Batcher:
    """The batcher registered as ``name``; UsageError (with a did-you-mean) for an unknown name."""
    return BATCHERS.get(name)(batch_size, bptt)
