"""The configs of the KV capability's commands, torch-free: ``attnlab stream``'s flags are built from
them (:mod:`attnlab.experiments.command`), and a run's config.json is one of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.experiments.command import option
from attnlab.experiments.config import check_fields
from attnlab.methods.configured import configured, methods_option
from attnlab.quant.options import QUANT


def _policy_names() -> list[str]:
    from attnlab.kv.policies import POLICIES

    return POLICIES.names()


@dataclass(frozen=True)
class StreamRun:
    """One ``attnlab stream`` run."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    text: str = option("kjv", "a text file, or kjv / war-and-peace / wikitext-2/test.txt")
    tokens: int = option(2048, "stream length in tokens", bounds=">= 2")
    policy: str = option("sinks", "KV-cache policy: {choices}", choices=_policy_names)
    budget: int | float = option(256, "tokens kept (256) or a fraction of those seen (0.2)", bounds="> 0")
    n_sink: int = option(4, "attention sinks kept by the policies that keep sinks", bounds=">= 0")
    recent: int | None = option(None, "recent window of the h2o policies (default: half the budget)",
                               bounds=">= 0")
    positions: str = option("rolling", "rolling (positions inside the cache) or original")
    chunk: int = option(1, "tokens per forward; 1 is the exact protocol", bounds=">= 1")
    recompute: bool = option(False, "also run the sliding window with re-computation at the same budget "
                             "(slow: O(T x budget))")
    dense: bool = option(True, "skip the dense baseline")
    methods: tuple[str, ...] = methods_option()

    ALIASES: ClassVar = {"quant": QUANT}

    def __post_init__(self):
        check_fields(self)  # each option's bounds, NaN and infinity refused (the command line checked them already)
        self.methods_applied()  # an unknown method, an impossible budget, two of a kind: refused before any work

    def methods_applied(self) -> list:
        """The methods this run applies: ``--method``, with ``--policy ...`` as the KV method unless a ``--method``
        gives one (``attnlab.methods.configured``)."""
        return configured(self)

    def make_policy(self):
        return next(m for m in self.methods_applied() if m.kind == "kv").policy()
