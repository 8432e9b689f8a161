"""The config of ``attnlab eval``, torch-free: one model, some tasks, and the methods applied while it answers
(a KV policy, a contextual-sparsity rule, a RoPE scaling), each named by its registry."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.accuracy.tasks import TASKS
from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.configured import (
    KV_FLAGS,
    QUANT,
    ROPE_FLAGS,
    SPARSITY_FLAGS,
    WEIGHTS_AND_ROPE,
    configured,
    methods_option,
    older,
)
from attnlab.sparsity.registry import RULES


def _policies() -> list[str]:
    from attnlab.kv.policies import POLICIES

    return POLICIES.names()


@dataclass(frozen=True)
class EvalRun:
    """One ``attnlab eval`` run: a model's accuracy on zero-/few-shot tasks with methods applied."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    tasks: tuple[str, ...] = option(("copa", "piqa", "arc_easy"), "comma-separated tasks: {choices}",
                                    choices=TASKS.names)
    data: str = option("eval", "folder of task files (<task>.jsonl, as ../shared/data/eval); default: the shipped ones",
                       metavar="DIR")
    limit: int | None = option(None, "the first N items of each task (default: all)", metavar="N")
    shots: int = option(5, "examples from the same task before each item (k-shot), drawn with --seed")
    seed: int = option(0, "seed of the few-shot draw")
    chunk: int = option(32, "context tokens per forward while streaming through a KV method (eviction between "
                        "chunks)")
    methods: tuple[str, ...] = methods_option()

    ALIASES: ClassVar = (older("kv", "policy", KV_FLAGS, {"budget": "0.2"}),
                         older("mlp", "sparsity", SPARSITY_FLAGS, {"keep": "0.5"}),
                         older("rope", "rope", ROPE_FLAGS, {"factor": "2.0"}, rename={"rope_factor": "factor"}), QUANT)

    def __post_init__(self):
        for name in self.tasks:
            TASKS.get(name)  # unknown: did you mean
        if not self.tasks:
            raise UsageError("--tasks: name at least one task")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit {self.limit}: give at least 1 item per task (or leave it out for all)")
        if self.shots < 0:
            raise UsageError(f"--shots {self.shots}: give 0 or more examples")
        if self.chunk < 1:
            raise UsageError(f"--chunk {self.chunk}: feed at least 1 token per forward")
        self.methods_applied()  # unknown names, impossible budgets, two of a kind: refused before any model loads

    def methods_applied(self) -> list:
        """The methods this run applies: ``--method``, and the older flags' of the kinds it does not give."""
        return configured(self)

    def kv_method(self):
        """The KV method the context streams through (None: the dense cache)."""
        return next((m for m in self.methods_applied() if m.kind == "kv"), None)

    def make_policy(self):
        kv = self.kv_method()
        return kv.policy() if kv else None

    def method(self) -> str:
        """The methods applied, as a table's row name ("h2o 20%", "int8 + cats keep 0.5"; ``dense`` when none)."""
        return " + ".join(m.label() for m in self.methods_applied()) or "dense"


@dataclass(frozen=True)
class AccuracyTable:
    """The seeds' accuracy tables in miniature: dense, KV policies at two budgets, sparsity rules at one keep."""

    model: str = option("smollm2", "alias (smollm2), model folder, attnlab train run or hub id")
    tasks: tuple[str, ...] = option(("copa", "piqa", "arc_easy", "openbookqa", "winogrande", "lambada"),
                                    "the table's columns: {choices}", choices=TASKS.names)
    data: str = option("eval", "folder of task files; default: the shipped ones", metavar="DIR")
    limit: int | None = option(100, "the first N items of each task")
    shots: int = option(5, "k-shot prompts, so that a budget evicts part of the context")
    seed: int = option(0, "seed of the few-shot draw")
    policies: tuple[str, ...] = option(("h2o", "sinks"), "KV policies (rows), each at every budget", choices=_policies)
    budgets: tuple[float, ...] = option((0.2, 0.5), "KV budgets: shares of the context kept")
    rules: tuple[str, ...] = option(("predicted", "cats", "oracle", "static"), "sparsity rules (rows) at --keep",
                                    choices=RULES.names)
    keep: float = option(0.5, "share of MLP neurons the rules keep")
    chunk: int = option(32, "context tokens per forward while streaming through a policy")
    methods: tuple[str, ...] = methods_option()  # applied under every row: the table of an int8 model, say

    METHOD_KINDS: ClassVar = WEIGHTS_AND_ROPE
    METHOD_WHY: ClassVar = ("the table's rows are its own KV policies and sparsity rules (--set policies=..., "
                            "rules=...); --method adds a weight scheme or RoPE scaling under every row")

    def __post_init__(self):
        configured(self)  # a KV or MLP method, or an unknown one: one line, before any row is built
        if not all(0 < b < 1 for b in self.budgets):
            raise UsageError(f"budgets={','.join(map(str, self.budgets))}: give shares of the context in (0, 1)")
        self.rows()  # each row's EvalRun checks its own names and numbers: refused before any work

    def rows(self) -> list[EvalRun]:
        """One EvalRun per table row: dense first, then each policy at each budget, then each rule."""
        base = dict(model=self.model, tasks=self.tasks, data=self.data, limit=self.limit, shots=self.shots,
                    seed=self.seed, chunk=self.chunk)
        under = self.methods
        return ([EvalRun(**base, methods=under)]
                + [EvalRun(**base, methods=(*under, f"{p}:budget={b}")) for p in self.policies for b in self.budgets]
                + [EvalRun(**base, methods=(*under, f"{r}:keep={self.keep}")) for r in self.rules])

    def name(self, row: EvalRun) -> str:
        """A row's name in the table: its own method ("h2o 20%"; "dense" for none), the methods under every row
        (--method) left out, so that the claims find their rows whatever the table runs under."""
        under = {m.spec() for m in configured(self)}
        return " + ".join(m.label() for m in row.methods_applied() if m.spec() not in under) or "dense"
