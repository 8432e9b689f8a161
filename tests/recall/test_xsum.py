"""H2O's XSum check: reading the file, ROUGE, repetition, budgets, and the experiment on a tiny model."""
import json

import pytest

from attnlab.cli import main
from attnlab.core.errors import ConfigError
from attnlab.recall.xsum import budget_of, read_xsum, repeated_ngrams, rouge, summary_of
from tiny_models import save_hf


def _xsum(path, n=5):
    rows = [{"article": f"###\nArticle: the cat number {i} sat on the mat.\n\nSummarize the above article in 1 "
                        "sentence.\n", "summary_gt": f"cat {i} sat", "max_tokens": 64} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_sample_is_seeded_and_keeps_the_file_order(tmp_path):
    f = _xsum(tmp_path / "x.jsonl", 20)
    a, b = read_xsum(f, 6, seed=1), read_xsum(f, 6, seed=1)
    assert a == b and [x.index for x in a] == sorted(x.index for x in a)
    assert read_xsum(f, 6, seed=2) != a
    assert a[0].reference == f"cat {a[0].index} sat"


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("not json\n", "line 1 is not JSON"),
    ('{"article": "x"}\n', "line 1 has no string field summary_gt"),
    ('\n["article"]\n', "line 2 has no string field article or summary_gt"), ("\n \n", "the file is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8 text (byte 0)"),
    ("caf\xe9\n".encode("latin-1"), "not UTF-8 text (byte 3)")])
def test_bad_files_are_one_clear_error(tmp_path, content, message):
    """Whatever is wrong with the file, the error names it, the problem, and what the file must be."""
    f = tmp_path / "x.jsonl"
    if isinstance(content, str):
        f.write_text(content)
    elif content is not None:
        f.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        read_xsum(f, 1)
    assert str(e.value).startswith(f"{f}: {message};") and "H2O's JSON-lines XSum file" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_binary_data_file_is_one_line_before_any_model_is_loaded(tmp_path, capsys):
    data = tmp_path / "x.bin"
    data.write_bytes(bytes(range(256)))
    code = main(["reproduce", "h2o-xsum", "--quick", "--out", str(tmp_path / "run"), "--set", f"data={data}",
                 "--set", f"model={tmp_path / 'no-model'}"])  # read first: the missing model is never reached
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"attnlab: error: {data}: not UTF-8 text"), err
    assert not (tmp_path / "run").exists()


def test_rouge_repetition_and_the_stop_sequence():
    assert rouge("a cat sat on the mat", "a cat sat on the mat") == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert rouge("dogs run", "a cat sat")["rouge1"] == 0.0
    assert rouge("the cats sat", "the cat sat")["rouge1"] == 1.0  # stemmed, as H2O's scorer
    assert repeated_ngrams("and and and and and") == pytest.approx(2 / 3)
    assert repeated_ngrams("one two three four five") == 0.0 and repeated_ngrams("too short") == 0.0
    assert summary_of(" A cat sat.\n###\nArticle: more") == "A cat sat."


def test_budgets_are_the_share_of_each_prompt_with_room_for_the_sinks():
    assert budget_of(450, 0.2, 0.5, 0) == (90, 45)
    assert budget_of(450, 0.2, 0.75, 4) == (90, 68)
    budget, recent = budget_of(10, 0.2, 0.5, 4)  # a tiny prompt still holds the sinks, one heavy hitter and recent
    assert budget == 6 and 1 <= recent <= budget - 4 - 1


@pytest.mark.slow
def test_h2o_xsum_runs_on_a_tiny_model(tmp_path):
    model, data, out = save_hf(tmp_path / "m"), _xsum(tmp_path / "x.jsonl"), tmp_path / "run"
    assert main(["reproduce", "h2o-xsum", "--quick", "--out", str(out), "--set", f"model={model}",
                 "--set", f"data={data}"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["runs"]) == {"full", "local", "h2o 10+10"}
    for rows in m["runs"].values():
        assert len(rows) == 3 and rows[-1]["index"] == -1  # two articles, then the cafe prompt
    assert (out / "h2o_xsum_rouge.png").exists()


@pytest.mark.parametrize("sets, message", [
    (["--set", "data=MISSING"], "none.jsonl"), (["--set", "max_new=0"], "max_new"), (["--set", "ratio=1.5"], "ratio"),
    (["--set", "caches=local"], "must include full")])
def test_bad_settings_exit_2_with_one_line(tmp_path, capsys, sets, message):
    sets = [s.replace("MISSING", str(tmp_path / "none.jsonl")) for s in sets]
    assert main(["reproduce", "h2o-xsum", "--quick", "--out", str(tmp_path / "r"), *sets]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not (tmp_path / "r").exists()
