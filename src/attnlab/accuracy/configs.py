"""The config of ``attnlab eval``, torch-free: one model, some tasks, and the methods applied while it answers
(a KV policy, a contextual-sparsity rule, a RoPE scaling), each named by its registry."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.accuracy.tasks import TASKS
from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.methods.configured import configured, methods_option
from attnlab.quant.options import QUANT
from attnlab.sparsity.registry import RULES


def _policies() -> list[str]:
    from attnlab.kv.policies import POLICIES

    return POLICIES.names()


def _scalings() -> list[str]:
    from attnlab.rope.scalings import SCALINGS

    return SCALINGS.names()


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
    policy: str = option("", "KV-cache policy the context streams through: {choices} (default: none, dense)",
                         choices=_policies)
    budget: int | float = option(0.2, "--policy's budget: tokens kept (256) or a share of the context seen (0.2)")
    n_sink: int = option(4, "attention sinks kept by the policies that keep sinks")
    recent: int | None = option(None, "recent window of the h2o policies (default: half the budget)")
    positions: str = option("original", "positions of kept tokens: original (H2O's masks) or rolling (StreamingLLM)")
    chunk: int = option(32, "context tokens per forward while streaming through --policy (eviction between chunks)")
    sparsity: str = option("", "contextual-sparsity rule on the MLPs: {choices} (default: none)", choices=RULES.names)
    keep: float = option(0.5, "--sparsity's share of MLP neurons kept per token, in (0, 1]")
    calibration: str = option("wikitext-2/valid.txt", "calibration text of the rules built from one")
    calibration_tokens: int = option(2048, "calibration tokens")
    predictors: str = option("", "--sparsity predicted: a dejavu run's predictors folder (default: beside the model)",
                             metavar="DIR")
    rope: str = option("", "RoPE scaling applied while answering: {choices} (default: none)", choices=_scalings)
    rope_factor: float = option(2.0, "--rope's factor (trained window x factor)")
    methods: tuple[str, ...] = methods_option()

    ALIASES: ClassVar = {"quant": QUANT}

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
        if self.positions not in ("original", "rolling"):
            raise UsageError(f"--positions {self.positions}: choose original or rolling")
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
        """The methods applied, as a table's row name (``dense`` when none); ``--method`` runs by their specs."""
        if self.methods:
            return " + ".join(m.spec() for m in self.methods_applied()) or "dense"
        parts = []
        if self.policy:
            b = f"{self.budget:g}" if isinstance(self.budget, float) else str(self.budget)
            parts.append(f"{self.policy} {float(self.budget):.0%}" if isinstance(self.budget, float) and self.budget < 1
                         else f"{self.policy} {b}")
        if self.sparsity:
            parts.append(f"{self.sparsity} keep {self.keep:g}")
        if self.rope not in ("", "none"):
            parts.append(f"{self.rope} x{self.rope_factor:g}")
        return " + ".join(parts) or "dense"


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

    def __post_init__(self):
        if not all(0 < b < 1 for b in self.budgets):
            raise UsageError(f"budgets={','.join(map(str, self.budgets))}: give shares of the context in (0, 1)")
        self.rows()  # each row's EvalRun checks its own names and numbers: refused before any work

    def rows(self) -> list[EvalRun]:
        """One EvalRun per table row: dense first, then each policy at each budget, then each rule."""
        base = dict(model=self.model, tasks=self.tasks, data=self.data, limit=self.limit, shots=self.shots,
                    seed=self.seed, chunk=self.chunk)
        return ([EvalRun(**base)]
                + [EvalRun(**base, policy=p, budget=b) for p in self.policies for b in self.budgets]
                + [EvalRun(**base, sparsity=r, keep=self.keep) for r in self.rules])
