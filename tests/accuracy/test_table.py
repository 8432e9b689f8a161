"""`attnlab reproduce accuracy-table` end to end on a tiny model: every row, its claims, a row that cannot run."""
import json

import pytest

from attnlab import cli
from attnlab.experiments.claims import check
from task_files import write_tasks
from tiny_models import byte_tokenizer, tiny


@pytest.mark.slow
def test_the_table_runs_every_row_and_states_its_claims(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    tiny("llama", 0, vocab_size=300, max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=256,
         eos_token_id=256).save_pretrained(folder)
    tok = byte_tokenizer()
    tok.add_special_tokens({"eos_token": "<|endoftext|>"})
    tok.save_pretrained(folder)
    data = write_tasks(tmp_path / "eval", n=8)
    out = tmp_path / "run"
    code = cli.main(["reproduce", "accuracy-table", "--out", str(out), "--set", f"model={folder}",
                     "--set", f"data={data}", "--set", "tasks=copa,winogrande,lambada", "--set", "limit=6",
                     "--set", "shots=1", "--set", "budgets=0.2"])
    assert code == 0
    m = json.loads((out / "metrics.json").read_text())
    rows = m["rows"]
    assert list(rows) == ["dense", "h2o 20%", "sinks 20%", "predicted keep 0.5", "cats keep 0.5",
                          "oracle keep 0.5", "static keep 0.5"]
    assert "predictors" in rows["predicted keep 0.5"]["skipped"]  # none trained for this model: a finding says so
    assert all(rows[r]["tasks"]["copa"]["items"] == 6 for r in rows if "tasks" in rows[r])
    assert rows["h2o 20%"]["tasks"]["copa"]["evicted"] > 0.5 and rows["dense"]["tasks"]["copa"]["evicted"] is None
    texts = [c["claim"] for c in m["claims"]]
    assert any(t.startswith("H2O at 20%") for t in texts) and any("static set is clearly worse" in t for t in texts)
    assert (out / "accuracy_vs_budget.png").is_file() and "| h2o 20% |" in (out / "report.md").read_text()
    for r in (r for r in rows.values() if "tasks" in r):  # each item's correctness, its mean the task's acc
        for t in r["tasks"].values():
            assert len(t["correct"]) == 6 and set(t["correct"]) <= {"0", "1"}
            assert t["correct"].count("1") / 6 == pytest.approx(t["acc"])
    checked = [c for c in m["claims"] if c["status"] != "finding"]
    assert len(checked) == 3  # H2O at 20%, the oracle's, static's: each over lambada at least (a cloze task: always)
    for c in checked:  # the interval decides: recomputed from it
        assert c["method"].startswith("paired bootstrap") and c["n"] % 6 == 0 and c["n"] >= 6
        again = check(c["claim"], c["measured"], c["expected"], c["tolerance"], c["test"], c["interval"], c["n"])
        assert again.status == c["status"]


@pytest.mark.slow
def test_a_row_that_answers_as_dense_is_a_point_interval_at_zero(tmp_path):
    """A KV budget above every prompt scores each item exactly as dense (test_lm.py): the same items right and
    wrong, so the paired interval of the difference is the point 0 and the claim holds; an evicting budget's
    interval is read from the same items."""
    from attnlab.accuracy.configs import EvalRun
    from attnlab.accuracy.paired import paired, paired_check
    from attnlab.accuracy.run import evaluate

    model = tiny("llama", 0, vocab_size=300, max_position_embeddings=512, tie_word_embeddings=True,
                 bos_token_id=256, eos_token_id=256)
    tok = byte_tokenizer()
    tok.add_special_tokens({"eos_token": "<|endoftext|>"})
    base = dict(data=str(write_tasks(tmp_path / "eval", n=12)), tasks=("copa", "winogrande", "lambada"), shots=1)
    table = {"dense": evaluate(EvalRun(**base), model, tok),
             "h2o all": evaluate(EvalRun(**base, methods=("h2o:budget=100000",), chunk=5), model, tok),
             "h2o 20%": evaluate(EvalRun(**base, methods=("h2o:budget=0.2",), chunk=5), model, tok)}
    tasks = list(base["tasks"])
    p = paired(table, "dense", "h2o all", tasks)
    assert p.interval == (0.0, 0.0) and p.discordance == 0 and p.n == 36
    assert paired_check("c", 0.0, 0.01, 1e-9, "at_most", p).status == "holds"
    evicting = paired(table, "dense", "h2o 20%", tasks)
    differ = sum(a != b for t in tasks for a, b in zip(table["dense"]["tasks"][t]["correct"],
                                                       table["h2o 20%"]["tasks"][t]["correct"]))
    assert evicting.discordance == differ / 36 and evicting.interval[0] <= evicting.interval[1]


def test_claims_skip_a_row_that_could_not_run_and_compare_only_tasks_above_chance():
    from attnlab.accuracy.configs import AccuracyTable
    from attnlab.accuracy.exp_table import claims

    def row(copa, piqa, n=200):  # the first copa x n, piqa x n items right
        return {"tasks": {t: {"acc": acc, "acc_stderr": 0.05, "chance": 0.5, "evicted": None,
                              "correct": "1" * round(acc * n) + "0" * (n - round(acc * n))}
                          for t, acc in (("copa", copa), ("piqa", piqa))}}

    table = {"dense": row(0.52, 0.70), "h2o 20%": row(0.50, 0.695), "predicted keep 0.5": {"skipped": "no predictors"},
             "oracle keep 0.5": row(0.9, 0.69), "static keep 0.5": row(0.1, 0.60)}
    out = {c.claim.split(":")[0]: c for c in claims(table, "dense", AccuracyTable(tasks=("copa", "piqa")))}
    h2o = next(c for k, c in out.items() if k.startswith("H2O at 20%"))
    assert h2o.measured == pytest.approx(0.005) and "copa left out" in h2o.claim  # copa: at chance
    assert h2o.n == 200 and "paired bootstrap" in h2o.method  # piqa's items only
    # 1 item of 200 lost: 0.5 point, but the interval (0 to about 1.5 points) reaches past the 1-point bound
    assert h2o.status == "unresolved" and h2o.interval[0] == 0 and h2o.interval[1] > 0.01
    assert "disagree on 0.5% of the 200 items" in h2o.note
    oracle = next(c for k, c in out.items() if k.startswith("the oracle"))
    assert oracle.measured == pytest.approx(0.01) and oracle.status == "unresolved"  # 1 point exactly, 2 items
    static = next(c for k, c in out.items() if k.startswith("a static set"))
    assert static.measured == pytest.approx(0.09) and static.status == "holds" and static.interval[0] >= 0.02
    assert not any(k.startswith("Deja Vu") for k in out)  # the row did not run: no claim on it
    skipped = out["predicted keep 0.5"]
    assert skipped.status == "finding" and "not run (no predictors)" in skipped.claim


def test_eval_with_method_equals_the_older_flags_it_replaces(tmp_path):
    """``methods=("h2o:budget=0.2", "oracle:keep=0.5", "int8")`` scores every item as ``policy=h2o, budget=0.2,
    sparsity=oracle, keep=0.5, quant=int8`` does: one stack enters both spellings."""
    from attnlab.accuracy.configs import EvalRun
    from attnlab.accuracy.run import evaluate
    from attnlab.experiments.config import resolve

    model = tiny("llama", 0, vocab_size=300, max_position_embeddings=512, tie_word_embeddings=True,
                 bos_token_id=256, eos_token_id=256)
    tok = byte_tokenizer()
    tok.add_special_tokens({"eos_token": "<|endoftext|>"})
    base = dict(data=str(write_tasks(tmp_path / "eval", n=8)), tasks=("copa", "lambada"), shots=1, chunk=5)
    older = {"policy": "h2o", "budget": "0.2", "sparsity": "oracle", "keep": "0.5", "quant": "int8"}  # --quant: alias
    old = evaluate(resolve(EvalRun, older, base), model, tok)
    new = evaluate(EvalRun(**base, methods=("h2o:budget=0.2", "oracle:keep=0.5", "int8")), model, tok)
    for t in base["tasks"]:
        assert new["tasks"][t]["correct"] == old["tasks"][t]["correct"]
        assert new["tasks"][t]["acc"] == old["tasks"][t]["acc"]
    assert old["method"] == new["method"] == "int8 + oracle keep 0.5 + h2o 20%"  # the stack's order, labelled
