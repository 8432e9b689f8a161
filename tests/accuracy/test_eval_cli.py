"""`attnlab eval`: bad input is one line and exit 2 with nothing written; the task files become lm-eval configs."""
import json

import pytest

from attnlab import cli
from attnlab.accuracy.tasks import TASKS, check_file, task_config
from attnlab.core.errors import UsageError


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "copa.jsonl").write_text("".join(json.dumps({"query": f"q{i}", "choices": ["a.", "b."], "gold": i % 2})
                                               + "\n" for i in range(4)))
    return folder


@pytest.mark.parametrize("argv, fragment", [
    (["--tasks", "coppa"], "did you mean 'copa'"),
    (["--data", "/nowhere/eval"], "../shared/data/eval"),
    (["--limit", "0"], "--limit 0"),
    (["--shots", "4"], "copa has 4 items, so at most 3 examples"),
    (["--policy", "sinks", "--budget", "3"], "budget 3 leaves no room beyond 4 sink(s)"),
    (["--policy", "h2p"], "did you mean 'h2o'"),
    (["--sparsity", "oracle", "--keep", "0"], "keep"),
    (["--tasks", "piqa"], "no piqa.jsonl there"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(data, tmp_path, capsys, argv, fragment):
    out = tmp_path / "run"
    code = cli.main(["eval", "--data", str(data), "--tasks", "copa", "--out", str(out), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and fragment in err[0], err
    assert not out.exists()


def test_a_malformed_line_is_named_by_file_and_line(data, tmp_path, capsys):
    with open(data / "copa.jsonl", "a") as f:
        f.write('{"query": "q", "choices": ["a."], "gold": 0}\n{not json\n')
    code = cli.main(["eval", "--data", str(data), "--tasks", "copa", "--out", str(tmp_path / "run")])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"{data / 'copa.jsonl'}:5: copa needs a list of at least 2 strings" in line
    (data / "copa.jsonl").write_text('{"query": "q", "choices": ["a.", "b."], "gold": 0}\n{not json\n')
    with pytest.raises(UsageError, match=r"copa.jsonl:2: not a JSON object"):
        check_file(TASKS.get("copa"), data)


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_has_a_config_lm_eval_can_read(name, tmp_path):
    task = TASKS.get(name)
    cfg = task_config(task, tmp_path, shots=3)
    assert cfg["dataset_path"] == "json" and cfg["dataset_kwargs"]["data_files"]["test"].endswith(task.file)
    assert cfg["num_fewshot"] == 3 and cfg["fewshot_split"] == cfg["test_split"]
    assert {m["metric"] for m in cfg["metric_list"]} >= {"acc"}
    assert cfg["output_type"] == ("loglikelihood" if task.shape == "cloze" else "multiple_choice")


def test_help_teaches_the_protocol(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    text = capsys.readouterr().out
    assert "acc_norm" in text and "--shots" in text and "evict" in text and "lm-evaluation-harness" in text


def test_chance_is_computed_from_the_items_options(tmp_path):
    from attnlab.accuracy.tasks import chance

    (tmp_path / "arc_easy.jsonl").write_text(json.dumps({"query": "q", "choices": ["a", "b"], "gold": 0}) + "\n"
                                             + json.dumps({"query": "q", "choices": list("abcd"), "gold": 3}) + "\n")
    assert chance(check_file(TASKS.get("arc_easy"), tmp_path)) == pytest.approx((1 / 2 + 1 / 4) / 2)
    (tmp_path / "lambada_openai.jsonl").write_text(json.dumps({"context": "a b", "continuation": "c"}) + "\n")
    assert chance(check_file(TASKS.get("lambada"), tmp_path)) is None


@pytest.mark.parametrize("name", ["copa", "winogrande", "lambada"])
def test_the_prompts_lm_eval_builds_read_as_the_items_text(name, tmp_path):
    """The (context, continuation) strings lm-eval makes from our configs, 2-shot: one space between a text
    and its answer, in the item and in every shot (a cloze word once lost its space: "... aboutsigns")."""
    from lm_eval.tasks import TaskManager

    from task_files import write_tasks

    folder = write_tasks(tmp_path / "tasks", n=6)
    task = TaskManager(include_defaults=False).load([task_config(TASKS.get(name), folder, shots=2)])["tasks"]
    task = next(iter(task.values())) if isinstance(task, dict) else task
    task.build_all_requests(limit=3, rank=0, world_size=1)
    items = [json.loads(line) for line in (folder / TASKS.get(name).file).read_text().splitlines()]
    for inst in task.instances:
        context, continuation = inst.args
        doc, (*shots, text) = items[inst.doc_id], context.split("\n\n")
        if name == "lambada":
            assert continuation == " " + doc["continuation"] and text == doc["context"]
        elif name == "copa":
            assert continuation in [" " + c for c in doc["choices"]] and text == doc["query"]
        else:
            assert continuation == " " + doc["continuation"] and text in doc["context_options"]
        assert len(shots) == 2 and "  " not in context + continuation
