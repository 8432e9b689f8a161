"""``attnlab reproduce streameval`` on a tiny model folder (byte tokenizer; no network)."""
import json

import pytest

from attnlab.cli import main
from tiny_models import save_hf

SETS = ["--set", "lines=12", "--set", "query_every=3", "--set", "distances=2,7", "--set", "budgets=140",
        "--set", "answer_tokens=3", "--set", "passkey_length=420", "--set", "passkey_budget=100",
        "--set", "passkey_depths=0,1"]


def _run(tmp_path, out, *extra):
    model = tmp_path / "m" if (tmp_path / "m").exists() else save_hf(tmp_path / "m")
    return main(["reproduce", "streameval", "--out", str(tmp_path / out), "--set", f"model={model}", *SETS, *extra])


@pytest.mark.slow
def test_workers_give_the_same_answers_as_one_process(tmp_path):
    assert _run(tmp_path, "one", "--set", "workers=1") == 0
    assert _run(tmp_path, "two", "--set", "workers=2") == 0
    one, two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert _same_answers(one, two)
    names = set(one["runs"])
    assert {"full", "sinks 4+136", "h2o 140", "sinks+h2o 140", "passkey: full", "passkey: sinks 4+96"} <= names
    assert (tmp_path / "one" / "streameval_accuracy.png").exists() and (tmp_path / "one" / "streameval_kept.png").exists()
    statuses = {c["status"] for c in one["claims"]}
    assert statuses <= {"holds", "fails", "finding"}


def _same_answers(one, two):
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    return all(strip(one["runs"][k]) == strip(two["runs"][k]) for k in one["runs"])


@pytest.mark.parametrize("sets, message", [
    (["--set", "budgets=20"], "smaller than 4 sink"),
    (["--set", "distances=40"], "longer than the stream"),
    (["--set", "policies=lru"], "policies"),
    (["--set", "passkey_budget=12"], "passkey_budget"),
    (["--set", "positions=absolute"], "positions"),
    (["--set", "answer_tokens=0"], "answer_tokens"),
    (["--set", "chat=true"], "has no chat template: use an instruction-tuned model or drop chat"),
])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, capsys, sets, message):
    save_hf(tmp_path / "m")
    capsys.readouterr()  # saving the model may print its own progress
    assert _run(tmp_path, "bad", *sets) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "bad").exists()
