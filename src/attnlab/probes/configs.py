"""The config of ``attnlab probe``, torch-free: the command's flags are built from it
(:mod:`attnlab.experiments.command`), and a run's config.json is one of it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.configured import NOT_KV, configured, methods_option


@dataclass(frozen=True)
class ProbeRun:
    """One ``attnlab probe`` run."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    probes: tuple[str, ...] = option((), "comma-separated probe names (default: every probe listed below)",
                                     metavar="NAMES")
    text: str = option("wikitext-2/test.txt", "a file, or wikitext-2/test.txt / kjv / war-and-peace")
    tokens: int = option(2048, "tokens of the text to stream")
    chunk: int = option(512, "tokens per forward; each attends to everything before it")
    view: int = option(512, "tokens of the text in OUT/view.html, attnlab view's page of its attention, sinks, "
                       "heavy hitters and KV eviction (0: no page)")
    options: tuple[str, ...] = option((), "an option of the chosen probes' constructors, repeatable: layers=7,14,22 "
                                      "(superposition), first=4, eps=0.3 (sinks), heavy=64 (heavy-hitters), ...",
                                      flag="--option", metavar="KEY=VALUE", repeat=True)
    methods: tuple[str, ...] = methods_option()

    METHOD_KINDS: ClassVar = NOT_KV
    METHOD_WHY: ClassVar = ("probe streams the text through the model's own cache (what it probes); give weight, RoPE "
                            "or sparsity methods, or see `attnlab view` for KV eviction")

    def __post_init__(self):
        from attnlab.probes.base import make_probes
        from attnlab.probes.run import chosen, probe_options

        configured(self)  # an unknown method or option, a KV policy: one line before the model loads
        if self.tokens < 2:
            raise UsageError(f"--tokens {self.tokens}: give at least 2 tokens")
        if self.chunk < 1:
            raise UsageError(f"--chunk {self.chunk}: give at least 1 token per forward")
        if self.view < 0:
            raise UsageError(f"--view {self.view}: give a token count (0: no page)")
        object.__setattr__(self, "probes", chosen(self.probes))  # (): every probe, named in config.json
        # built once here, so that a bad option (its type, its bounds) is one line before any model is loaded
        make_probes(self.probes, **probe_options(self.options, self.probes))
