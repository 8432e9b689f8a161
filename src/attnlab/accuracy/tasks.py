"""The zero-shot tasks: local JSON-lines files turned into lm-evaluation-harness task configs (torch-free).

One file per task in a data folder (``--data DIR``; by default ``eval``, looked up like every corpus and
shipped with the package), one item per line in one of three shapes, as mosaicml/llm-foundry formats them:

- ``choice`` (COPA, OpenBookQA, PIQA, SIQA, ARC, BoolQ): ``query``, ``choices``, ``gold`` -- each choice is
  scored as the continuation of the query (lm-eval's ``multiple_choice``);
- ``partial`` (Winogrande): ``context_options``, ``continuation``, ``gold`` -- the same continuation scored
  after each context (lm-eval's multiple-input form: the "partial evaluation" of the Winogrande paper);
- ``cloze`` (LAMBADA): ``context``, ``continuation`` -- right when the last word is the greedy prediction
  (lm-eval's ``loglikelihood`` output, ``acc`` from ``is_greedy``).

:func:`task_config` writes the config lm-eval's ``TaskManager`` loads (``dataset_path: json`` with the
file in ``data_files``: read offline by the datasets library); lm-eval computes ``acc``, ``acc_norm`` and
their standard errors. :func:`check_file` reads every line first, so a malformed item is one line naming
its file and line number instead of a traceback from deep inside ``datasets``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry


@dataclass(frozen=True)
class Task:
    name: str
    file: str  # under the data folder
    shape: str  # choice | partial | cloze
    title: str

    @property
    def fields(self) -> tuple[str, ...]:
        return {"choice": ("query", "choices", "gold"), "partial": ("context_options", "continuation", "gold"),
                "cloze": ("context", "continuation")}[self.shape]


TASKS: Registry[Task] = Registry("task", "see `attnlab eval --help`")
for _t in (Task("copa", "copa.jsonl", "choice", "COPA"),
           Task("openbookqa", "openbook_qa.jsonl", "choice", "OpenBookQA"),
           Task("piqa", "piqa.jsonl", "choice", "PIQA"),
           Task("siqa", "siqa.jsonl", "choice", "SIQA"),
           Task("arc_easy", "arc_easy.jsonl", "choice", "ARC-Easy"),
           Task("arc_challenge", "arc_challenge.jsonl", "choice", "ARC-Challenge"),
           Task("boolq", "boolq.jsonl", "choice", "BoolQ"),
           Task("winogrande", "winogrande.jsonl", "partial", "Winogrande"),
           Task("lambada", "lambada_openai.jsonl", "cloze", "LAMBADA")):
    TASKS.add(_t.name, _t)

METRICS = {"choice": ("acc", "acc_norm"), "partial": ("acc",), "cloze": ("acc", "perplexity")}


def check_file(task: Task, folder: Path) -> list[int]:
    """The number of options of each item in ``task``'s file under ``folder`` (1 for a cloze item); UsageError
    naming file and line for a bad one."""
    path = folder / task.file
    if not path.is_file():
        raise UsageError(f"--data {folder}: no {task.file} there for task {task.name}; give a folder of task files "
                         "with --data DIR (the shipped ones are used by default)")
    options = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{i}: not a JSON object ({e.msg}); one item per line") from None
            if not isinstance(item, dict) or (missing := [k for k in task.fields if k not in item]):
                want = ", ".join(task.fields)
                raise UsageError(f"{path}:{i}: an item of {task.name} needs the fields {want}"
                                 + (f" (missing {missing[0]})" if isinstance(item, dict) else ""))
            options.append(_check_item(task, item, f"{path}:{i}"))
    if not options:
        raise UsageError(f"{path}: no items; one JSON object per line")
    return options


def chance(options: list[int]) -> float | None:
    """The accuracy of a uniform guess over these items' options (None for cloze items: no options)."""
    return None if all(n == 1 for n in options) else sum(1 / n for n in options) / len(options)


def _check_item(task: Task, item: dict, where: str) -> int:
    """The item's number of options (1 for a cloze item), once its fields are checked."""
    if task.shape == "cloze":
        return 1
    options = item["choices" if task.shape == "choice" else "context_options"]
    if not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) for o in options):
        raise UsageError(f"{where}: {task.name} needs a list of at least 2 strings to choose from")
    if not isinstance(item["gold"], int) or not 0 <= item["gold"] < len(options):
        raise UsageError(f"{where}: gold={item['gold']!r} is not the index of one of its {len(options)} options")
    return len(options)


def task_config(task: Task, folder: Path, shots: int, seed: int = 0) -> dict:
    """The lm-eval task config (a dict, as a YAML file would give it) that reads ``task``'s local file."""
    common = {
        "task": f"attnlab_{task.name}",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str((folder / task.file).resolve())}},
        "test_split": "test",
        "fewshot_split": "test",  # the pool: the same file, the item itself left out by lm-eval's sampler
        "fewshot_config": {"sampler": "default"},
        "num_fewshot": shots,
        "target_delimiter": " ",
        "fewshot_delimiter": "\n\n",
        "metric_list": [{"metric": m, "aggregation": "perplexity" if m == "perplexity" else "mean",
                         "higher_is_better": m != "perplexity"} for m in METRICS[task.shape]],
        "metadata": {"version": 1.0, "source": task.file},
    }
    if task.shape == "choice":
        return common | {"output_type": "multiple_choice", "doc_to_text": "{{query}}",
                         "doc_to_choice": "{{choices}}", "doc_to_target": "{{gold}}"}
    if task.shape == "partial":  # doc_to_text gives the gold index: lm-eval then scores the target after each choice
        return common | {"output_type": "multiple_choice", "doc_to_text": "{{gold}}",
                         "doc_to_choice": "{{context_options}}", "doc_to_target": "{{continuation}}"}
    # a loglikelihood request is (context, doc_to_target) as they are: lm-eval puts target_delimiter only
    # between a few-shot example's text and its target, so the space before the word is the target's own (as
    # in lm-eval's lambada_openai.yaml) and the delimiter is empty. With " " and a bare word, the item read
    # "... care aboutsigns" (SmolLM2: PPL 2.8M, accuracy 0), and every shot "... about  signs".
    return common | {"output_type": "loglikelihood", "doc_to_text": "{{context}}",
                     "doc_to_target": "{{' ' + continuation}}", "target_delimiter": ""}
