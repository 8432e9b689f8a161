"""The ``basic_english`` word tokenizer and a vocabulary built from the training split.

basic_english is the scheme the Scan&Snap and JoMA authors trained with; the vocabulary maps
every word outside the training split to ``<unk>``.

basic_english: lower-case; quotes ``"`` and the markup ``<br />`` dropped; ``'`` kept as its
own token; ``. , ( ) ! ?`` split off as tokens; ``; :`` removed; split on whitespace.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import torch

from attnlab.core.errors import UsageError

UNK = "<unk>"

# (pattern, replacement), applied in this order to the lower-cased line
BASIC_ENGLISH_RULES = [(re.compile(p), r) for p, r in (
    (r"'", " '  "), (r'"', ""), (r"\.", " . "), (r"<br \/>", " "), (r",", " , "), (r"\(", " ( "),
    (r"\)", " ) "), (r"!", " ! "), (r"\?", " ? "), (r";", " "), (r":", " "), (r"\s+", " "),
)]


def basic_english(line: str) -> list[str]:
    line = line.lower()
    for pattern, replacement in BASIC_ENGLISH_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


@dataclass(frozen=True)
class Vocab:
    """Token <-> id. ``itos[0]`` is ``<unk>``; the rest by decreasing training frequency
    (ties: first seen first), so ids are reproducible from the training text alone."""

    itos: tuple[str, ...]

    @classmethod
    def build(cls, token_lines: Iterable[list[str]], max_size: int | None = None, min_freq: int = 1) -> "Vocab":
        if max_size is not None and max_size < 1:
            raise UsageError(f"vocabulary limit {max_size}: use at least 1 (or no limit)")
        counts = Counter()
        for tokens in token_lines:
            counts.update(tokens)
        counts.pop(UNK, None)  # WikiText's own <unk> is our id 0
        words = [w for w, c in sorted(counts.items(), key=lambda kv: -kv[1]) if c >= min_freq]
        if max_size is not None:
            words = words[: max_size - 1]
        return cls((UNK, *words))

    def __len__(self) -> int:
        return len(self.itos)

    @cached_property  # written into the instance __dict__, so it works on a frozen dataclass
    def stoi(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.itos)}

    def encode(self, tokens: list[str]) -> list[int]:
        stoi = self.stoi
        return [stoi.get(t, 0) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in ids]

    def numericalize(self, lines: Iterable[str], tokenize=basic_english) -> torch.Tensor:
        """All lines' token ids, concatenated (blank lines dropped), as the tutorial does. -> (N,) long."""
        ids = [i for line in lines for i in self.encode(tokenize(line))]
        return torch.tensor(ids, dtype=torch.long)
