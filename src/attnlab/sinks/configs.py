"""The config of ``attnlab sink-table``, torch-free: the command's flags are built from it
(:mod:`attnlab.experiments.command`), and a run's config.json is one of it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.configured import NOT_KV, configured, methods_option


@dataclass(frozen=True)
class SinkTableRun:
    """One ``attnlab sink-table`` run."""

    model: str = option("smollm2", "alias (smollm2), model folder or attnlab train run")
    text: str = option("kjv", "a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    tokens: int = option(2048, "stream length in tokens")
    window: int = option(256, "cache size W")
    sinks: tuple[int, ...] = option((0, 1, 2, 4), "sink counts n, comma-separated")
    methods: tuple[str, ...] = methods_option()

    METHOD_KINDS: ClassVar = NOT_KV
    METHOD_WHY: ClassVar = "sink-table streams through its own caches n+(W-n); give weight, RoPE or sparsity methods"

    def __post_init__(self):
        configured(self)  # an unknown method or option, a KV policy: one line before the model loads
        if not self.sinks or min(self.sinks) < 0 or max(self.sinks) >= self.window:
            raise UsageError(f"--sinks {','.join(map(str, self.sinks))} with --window {self.window}: each must be "
                             f">= 0 and below the window (the cache holds n sinks + window - n recent tokens)")
        if self.tokens <= self.window:
            raise UsageError(f"--tokens {self.tokens} must exceed --window {self.window}, or no cache ever evicts")
