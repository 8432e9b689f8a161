"""`attnlab reproduce accuracy-table` end to end on a tiny model: every row, its claims, a row that cannot run."""
import json

import pytest

from attnlab import cli
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
                     "--set", f"data={data}", "--set", "tasks=copa,winogrande", "--set", "limit=6",
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


def test_claims_skip_a_row_that_could_not_run_and_compare_only_tasks_above_chance():
    from attnlab.accuracy.configs import AccuracyTable
    from attnlab.accuracy.exp_table import claims

    def row(copa, piqa):
        return {"tasks": {"copa": {"acc": copa, "acc_stderr": 0.05, "chance": 0.5, "evicted": None},
                          "piqa": {"acc": piqa, "acc_stderr": 0.05, "chance": 0.5, "evicted": None}}}

    table = {"dense": row(0.52, 0.70), "h2o 20%": row(0.50, 0.695), "predicted keep 0.5": {"skipped": "no predictors"},
             "oracle keep 0.5": row(0.9, 0.69), "static keep 0.5": row(0.1, 0.60)}
    out = {c.claim.split(":")[0]: c for c in claims(table, "dense", AccuracyTable(tasks=("copa", "piqa")))}
    h2o = next(c for k, c in out.items() if k.startswith("H2O at 20%"))
    assert h2o.holds and h2o.measured == pytest.approx(0.005) and "copa left out" in h2o.claim  # copa: at chance
    oracle = next(c for k, c in out.items() if k.startswith("the oracle"))
    assert oracle.holds and oracle.measured == pytest.approx(0.01)  # 1 point exactly: within
    assert not any(k.startswith("Deja Vu") for k in out)  # the row did not run: no claim on it
    skipped = out["predicted keep 0.5"]
    assert skipped.status == "finding" and "not run (no predictors)" in skipped.claim
