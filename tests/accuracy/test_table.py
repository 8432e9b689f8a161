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
