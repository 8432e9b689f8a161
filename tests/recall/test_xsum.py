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


def _runs(**rouge1):
    """Per-article rows of each cache (ROUGE-1 as given; the other scores unused by the claims), no cafe."""
    return {name: [{"index": i, "rouge1": r, "rouge2": 0.0, "rougeL": r, "repeated": 0.0} for i, r in enumerate(rs)]
            for name, rs in rouge1.items()}


def _claims(runs, **cfg):
    import numpy as np

    from attnlab.recall.exp_xsum import XSumConfig, _claims

    mean = {n: {k: float(np.mean([r[k] for r in rows])) for k in ("rouge1", "rouge2", "rougeL", "repeated")}
            for n, rows in runs.items()}
    return _claims(XSumConfig(**cfg), mean, {}, runs)


FULL = [0.05, 0.4, 0.1, 0.3, 0.2, 0.02, 0.35, 0.15]  # articles differ widely in how well they summarise


def test_the_rouge_claims_carry_a_paired_interval_over_articles():
    """h2o at 0.9 x full on every article: the ratio is 0.9 in every resample of the articles -- a point,
    however much the articles differ (unpaired, their spread would widen it)."""
    keeps, loses, *found = _claims(_runs(full=FULL, local=[0.5 * x for x in FULL], **{"h2o 10+10": [0.9 * x
                                                                                               for x in FULL]}))
    assert keeps.measured == pytest.approx(0.9) and keeps.interval == pytest.approx((0.9, 0.9))
    assert keeps.status == "holds" and keeps.n == 8 and "over articles" in keeps.method
    assert loses.measured == pytest.approx(0.5 / 0.9) and loses.status == "holds" and loses.n == 8
    assert [c.status for c in found] == ["finding"] * 3


def test_a_rouge_claim_the_articles_leave_open_is_unresolved():
    """h2o beats full on some articles and loses on others, 0.74 x full on the mean: the interval straddles 0.8."""
    h2o = [x * f for x, f in zip(FULL, (1.6, 0.4, 1.5, 0.5, 1.2, 0.3, 0.6, 1.1))]
    keeps, *_ = _claims(_runs(full=FULL, local=FULL, **{"h2o 10+10": h2o}))
    lo, hi = keeps.interval
    assert lo < 0.8 <= hi and keeps.status == "unresolved" and keeps.holds is None


def test_a_full_cache_scoring_nothing_fails_without_an_interval():
    keeps, loses, *_ = _claims(_runs(full=[0.0] * 4, local=[0.1] * 4, **{"h2o 10+10": [0.0] * 4}))
    assert keeps.status == loses.status == "fails" and keeps.interval is None and loses.interval is None


def test_the_quick_mode_s_claims_are_findings():
    claims = _claims(_runs(full=FULL, local=FULL, **{"h2o 10+10": FULL}), checked=False)
    assert {c.status for c in claims} == {"finding"} and all(c.interval is None for c in claims)


@pytest.mark.slow
def test_checked_claims_on_a_tiny_model(tmp_path):
    """End to end, claims checked: per-article ROUGE kept for every cache; a ratio claim either carries its
    interval over the articles (and its status follows from it) or, where the full cache scores no ROUGE at all
    (this random tiny model's summaries are empty), is NaN and fails without one; the cafe claim has none."""
    from attnlab.experiments.claims import check

    model, data, out = save_hf(tmp_path / "m"), _xsum(tmp_path / "x.jsonl"), tmp_path / "run"
    assert main(["reproduce", "h2o-xsum", "--quick", "--out", str(out), "--set", f"model={model}",
                 "--set", f"data={data}", "--set", "articles=4", "--set", "checked=true"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    keeps, loses, cafe = [c for c in m["claims"] if c["status"] != "finding"]
    assert "interval" not in cafe and "one prompt" in cafe["note"]
    for c in (keeps, loses):
        if c["measured"] is None:  # a cache scoring no ROUGE at all on these articles: NaN, no interval, fails
            assert c["status"] == "fails" and "interval" not in c
            continue
        assert c["n"] == 4 and c["interval"][0] <= c["interval"][1]
        again = check(c["claim"], c["measured"], c["expected"], c["tolerance"], c["test"], c["interval"], c["n"])
        assert again.status == c["status"]
    assert all(len(rows) == 5 and all("rouge1" in r for r in rows[:4]) for rows in m["runs"].values())
