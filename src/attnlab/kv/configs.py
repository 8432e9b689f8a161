"""The configs of the KV capability's commands, torch-free: ``attnlab stream``'s flags are built from
them (:mod:`attnlab.experiments.command`), and a run's config.json is one of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.experiments.config import check_fields
from attnlab.methods.base import refuse_uncompilable
from attnlab.methods.configured import KV_FLAGS, QUANT, configured, methods_option, older


@dataclass(frozen=True)
class StreamRun:
    """One ``attnlab stream`` run."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    text: str = option("kjv", "a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    tokens: int = option(2048, "stream length in tokens", bounds=">= 2")
    chunk: int = option(1, "tokens per forward; 1 is the exact protocol", bounds=">= 1")
    recompute: bool = option(False, "also run the sliding window with re-computation at the same budget "
                             "(slow: O(T x budget))")
    dense: bool = option(True, "skip the dense baseline")
    compile: bool = option(False, "also stream the full cache through a static cache with the decode step "
                           "compiled once (torch.compile; needs a C++ compiler), and the run's own cache with its "
                           "steady step compiled where it has one (a token budget): same NLL, how much faster")
    compile_wrapper: str = option("python", "with --compile, what calls the compiled step's kernels: python, or cpp "
                                  "(inductor's C++ wrapper: minutes more to compile once, less time a step)",
                                  metavar="WRAPPER")
    methods: tuple[str, ...] = methods_option()

    # the KV cache it streams through when --method names none: StreamingLLM's 4 sinks + 252 recent, rolling
    DEFAULT_METHODS: ClassVar = ("sinks:budget=256,positions=rolling",)
    ALIASES: ClassVar = (older("kv", "policy", KV_FLAGS, {"budget": "256", "n_sink": "4", "positions": "rolling"},
                               "sinks"), QUANT)

    def __post_init__(self):
        check_fields(self)  # each option's bounds, NaN and infinity refused (the command line checked them already)
        self.methods_applied()  # an unknown method, an impossible budget, two of a kind: refused before any work
        if self.compile:
            self.check_compile()
        elif self.compile_wrapper != "python":
            raise UsageError(f"--compile-wrapper {self.compile_wrapper} applies to the compiled step: add --compile")

    def methods_applied(self) -> list:
        """The methods this run applies: ``--method``'s (the older ``--policy ...`` among them), with the sinks
        cache unless one names a KV policy (``attnlab.methods.configured``)."""
        return configured(self)

    def make_policy(self):
        return next(m for m in self.methods_applied() if m.kind == "kv").policy()

    def check_compile(self) -> None:
        """--compile streams the full cache one token a forward beside the run's own cache, under the run's
        other methods where a compiled step can run them (the one rule: ``methods.refuse_uncompilable``)."""
        if self.chunk != 1:
            raise UsageError(f"--compile decodes one token a forward: drop --chunk {self.chunk}")
        refuse_uncompilable([m for m in self.methods_applied() if m.kind != "kv"])
        from attnlab.models.compiled import check_wrapper  # torch's: only once --compile asks for it

        check_wrapper(self.compile_wrapper, "--compile-wrapper")
