"""benchmarks/bandwidth_ledger.py on a tiny model folder: one row per configuration, each the ledger its
`attnlab stream` run wrote, every one streamed one token a step (the full cache too, not stream's batched dense
control); int8 reads fewer bytes than float, an evicting cache fewer
than the full one."""
import json

from tiny_models import save_hf


def test_one_ledger_row_per_configuration(load_benchmark, monkeypatch, tmp_path, capsys):
    mod = load_benchmark("bandwidth_ledger")
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(mod, "CONFIGS", [("fp32, full cache", ["full"]), ("fp32, sinks 16", ["sinks:budget=16"]),
                                         ("int8, full cache", ["int8", "full"])])
    (tmp_path / "text.txt").write_text("the cat sat on the mat and the dog ran to the cat. " * 20)
    model = save_hf(tmp_path / "m")
    assert mod.main(["--model", str(model), "--text", str(tmp_path / "text.txt"), "--tokens", "48",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    for name in ("fp32, full cache", "fp32, sinks 16", "int8, full cache"):
        assert f"| {name} |" in out
    rows = {r["config"]: r for r in json.loads((tmp_path / "r" / "result.json").read_text())["rows"]}
    assert rows["int8, full cache"]["weight_bytes"] < rows["fp32, full cache"]["weight_bytes"]
    assert rows["fp32, sinks 16"]["kv_bytes"] < rows["fp32, full cache"]["kv_bytes"]
    assert all(0 < r["yield"] for r in rows.values())
