"""benchmarks/bandwidth_ledger.py on a tiny model folder: one row per configuration, each the ledger its
`attnlab stream` run wrote, every one streamed one token a step (the full cache too, not stream's batched dense
control); int8 reads fewer bytes than bf16, bf16 fewer than fp32, an evicting cache fewer than the full one; the
configurations streamed with --compile add their compiled steps' rows."""
import json

import pytest

from tiny_models import save_hf


def test_one_ledger_row_per_run_at_one_ceiling(load_benchmark, monkeypatch, tmp_path, capsys):
    mod = load_benchmark("bandwidth_ledger")
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    Config = mod.Config
    monkeypatch.setattr(mod, "CONFIGS", [Config("fp32, full cache", ["full"]),
                                         Config("fp32, sinks 16", ["sinks:budget=16"], "fp32, full cache, compiled"),
                                         Config("bf16, full cache", ["bf16", "full"]),
                                         Config("int8, full cache", ["int8", "full"])])
    (tmp_path / "text.txt").write_text("the cat sat on the mat and the dog ran to the cat. " * 20)
    model = save_hf(tmp_path / "m")
    assert mod.main(["--model", str(model), "--text", str(tmp_path / "text.txt"), "--tokens", "48",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    # the compiled configuration's two compiled steps follow its own run
    names = ["fp32, full cache", "fp32, sinks 16", "fp32, full cache, compiled", "fp32, sinks 16, compiled",
             "bf16, full cache", "int8, full cache"]
    for name in names:
        assert f"| {name} |" in out
    rows = {r["config"]: r for r in json.loads((tmp_path / "r" / "result.json").read_text())["rows"]}
    assert list(rows) == names
    # the same bytes compiled as eager: a step reads the same weights; the static cache holds the whole stream
    assert rows["fp32, sinks 16, compiled"]["weight_bytes"] == rows["fp32, sinks 16"]["weight_bytes"]
    assert rows["fp32, full cache, compiled"]["kv_bytes"] >= rows["fp32, full cache"]["kv_bytes"]
    bytes_of = {w: rows[f"{w}, full cache"]["weight_bytes"] for w in ("fp32", "bf16", "int8")}
    assert bytes_of["int8"] < bytes_of["bf16"] < bytes_of["fp32"]
    assert rows["fp32, sinks 16"]["kv_bytes"] < rows["fp32, full cache"]["kv_bytes"]
    # one ceiling for every row: the best of the stream commands' own copy measurements (one a command: the
    # compiled configuration's three rows share one), each kept beside it
    seen = {r["run_bandwidth_bytes_per_s"] for r in rows.values()}
    assert len({rows[n]["run_bandwidth_bytes_per_s"] for n in names[1:4]}) == 1
    bw = json.loads((tmp_path / "r" / "result.json").read_text())["bandwidth"]
    assert bw["n"] == 4 and bw["best"] == max(seen) and bw["lowest"] == min(seen)
    best = bw["best"]
    for r in rows.values():
        assert r["bandwidth_bytes_per_s"] == best >= r["run_bandwidth_bytes_per_s"]
        assert r["roofline_tokens_per_s"] == best / r["bytes_per_token"]
        assert 0 < r["yield"] == r["tokens_per_s"] / r["roofline_tokens_per_s"]
        assert r["late_tokens_per_s"] > 0  # every row streams token by token: a rate over its last half


def test_a_stream_too_short_for_the_compiled_rows_steady_half_is_refused_before_any_run(load_benchmark, tmp_path,
                                                                                         capsys):
    mod = load_benchmark("bandwidth_ledger")
    need = mod.least_tokens(mod.CONFIGS)
    assert need == 2 * (256 + 1)  # the sinks configurations' cache is full at its budget + 1
    with pytest.raises(SystemExit) as e:
        mod.main(["--tokens", str(need - 1), "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and f"need at least {need}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
