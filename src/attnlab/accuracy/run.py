"""Accuracy of one configured model through lm-evaluation-harness: tasks checked, methods entered, scores read.

``evaluate`` is the library function the ``eval`` and ``accuracy-table`` experiments share: it checks the
task files (one line naming file and line for a bad item), builds lm-eval's task configs, enters the
methods through the one stack (:mod:`attnlab.methods`: restored on exit; the KV policy lives in the
``LM``'s cache) and runs ``lm_eval.simple_evaluate`` with :class:`EvictingLM`.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import time
from pathlib import Path

from attnlab.accuracy.configs import EvalRun
from attnlab.accuracy.tasks import TASKS, Task, chance, check_file, task_config
from attnlab.core.errors import UsageError
from attnlab.data.sources import locate


def task_folder(data: str) -> Path:
    """The folder of task files ``data`` names (a path, or a name looked up like every corpus)."""
    if data != "eval" and not Path(data).expanduser().exists() and ("/" in data or data.startswith((".", "~"))):
        raise UsageError(f"--data {data}: no such folder; give a folder of task files such as ../shared/data/eval, "
                         "or leave --data out for the shipped ones")
    folder = locate(data, "data", "--data DIR (a folder of task files such as ../shared/data/eval)")
    if not folder.is_dir():
        raise UsageError(f"--data {data}: not a folder; give a folder of <task>.jsonl files such as "
                         "../shared/data/eval")
    return folder


def checked_tasks(cfg: EvalRun) -> tuple[Path, list[Task], dict[str, list[int]]]:
    """The data folder, the tasks and each item's number of options; refused in one line before any model loads."""
    folder = task_folder(cfg.data)
    tasks = [TASKS.get(name) for name in cfg.tasks]
    options = {t.name: check_file(t, folder) for t in tasks}
    for t in tasks:
        if cfg.shots >= len(options[t.name]):
            raise UsageError(f"--shots {cfg.shots}: {t.name} has {len(options[t.name])} items, so at most "
                             f"{len(options[t.name]) - 1} examples can precede one")
    return folder, tasks, options


def request_count(cfg: EvalRun) -> int:
    """How many log-likelihoods ``cfg`` asks for (one per option of each item): a progress bar's total."""
    _, tasks, options = checked_tasks(cfg)
    return sum(sum(options[t.name][:cfg.limit]) for t in tasks)


def methods(cfg: EvalRun, model, tok, device: str, progress):
    """``cfg``'s methods entered on ``model`` by the one stack (restored on exit); the KV method's cache is the
    LM's, one per request."""
    from attnlab.methods import Context, apply

    return apply(model, *cfg.methods_applied(), ctx=Context(tok, device, progress, cfg.model))


def evaluate(cfg: EvalRun, model, tok, device: str = "cpu", progress=None) -> dict:
    """Per task: items, acc (and acc_norm / perplexity where lm-eval gives them) with standard errors, chance,
    the share of context tokens the policy evicted, seconds and items/s, each item's correctness (``correct``);
    and the unweighted average accuracy. Each task is one ``simple_evaluate`` call, so its wall time is its own."""
    folder, tasks, options = checked_tasks(cfg)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the task files are local: never ask the hub
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    per_task = {}
    with methods(cfg, model, tok, device, progress):
        for t in tasks:
            per_task[t.name] = _one_task(cfg, t, folder, options[t.name][:cfg.limit], model, tok, progress)
    seconds = sum(r["seconds"] for r in per_task.values())
    return {"method": cfg.method(), "tasks": per_task, "average_acc": sum(r["acc"] for r in per_task.values())
            / len(per_task), "seconds": seconds, "items_per_s": sum(r["items"] for r in per_task.values()) / seconds,
            "shots": cfg.shots, "lm_eval": _version()}


def _one_task(cfg: EvalRun, task: Task, folder: Path, options: list[int], model, tok, progress) -> dict:
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    from attnlab.accuracy.lm import EvictingLM

    kv = cfg.kv_method()
    lm = EvictingLM(model, tok, kv.policy() if kv else None, kv.positions if kv else "original", cfg.chunk, progress,
                    lag_limit=kv.lag_limit if kv else 0)
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()), _lean_lm_eval():  # lm-eval's progress bars hidden; ours shows
        out = evaluator.simple_evaluate(model=lm, tasks=[task_config(task, folder, cfg.shots)],
                                        task_manager=TaskManager(include_defaults=False), limit=cfg.limit,
                                        bootstrap_iters=1000, random_seed=cfg.seed, fewshot_random_seed=cfg.seed,
                                        log_samples=True, verbosity="ERROR")
    seconds = time.perf_counter() - t0
    r = out["results"][f"attnlab_{task.name}"]
    row = {"items": len(options), "chance": chance(options), "evicted": _mean(lm.evicted.get(f"attnlab_{task.name}")),
           "seconds": seconds, "items_per_s": len(options) / seconds,
           "correct": correct_items(out["samples"][f"attnlab_{task.name}"])}
    for metric in ("acc", "acc_norm", "perplexity"):
        if f"{metric},none" in r:
            row[metric] = r[f"{metric},none"]
            stderr = r.get(f"{metric}_stderr,none")
            row[f"{metric}_stderr"] = stderr if isinstance(stderr, (int, float)) else None
    return row


def correct_items(samples: list[dict]) -> str:
    """Each item's correctness in the file's order, one digit an item ("1": right): what paired comparisons
    between rows resample (lm-eval's per-document ``acc``). A string, so metrics.json keeps it on one line."""
    return "".join(str(int(s["acc"])) for s in sorted(samples, key=lambda s: s["doc_id"]))


@contextlib.contextmanager
def _lean_lm_eval():
    """lm-eval's per-run bookkeeping without its costs: on every ``simple_evaluate`` it runs ``git describe``
    (which prints "fatal: not a git repository" to the terminal outside a checkout) and torch's
    ``collect_env`` (~1.5 s of subprocesses here, per task and row of a table). attnlab records its own
    versions in metrics.json; for the call only, both are replaced by what lm-eval stores when they fail."""
    from lm_eval import evaluator

    saved = evaluator.get_git_commit_hash, evaluator.add_env_info
    evaluator.get_git_commit_hash = lambda: None
    evaluator.add_env_info = lambda storage: storage.update({"lm_eval_version": _version()})
    try:
        yield
    finally:
        evaluator.get_git_commit_hash, evaluator.add_env_info = saved


def _mean(xs) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def above_chance(row: dict, k: float = 2.0) -> bool:
    """Whether a task's accuracy is above chance by more than ``k`` standard errors (comparisons need it); a
    cloze task (LAMBADA) has no chance level and is always compared."""
    if row.get("chance") is None:
        return True
    stderr = row.get("acc_stderr")
    return stderr is not None and not math.isnan(stderr) and row["acc"] - row["chance"] > k * stderr
