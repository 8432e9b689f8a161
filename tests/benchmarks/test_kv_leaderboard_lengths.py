"""benchmarks/kv_leaderboard_lengths.py: a leaderboard run's answers split by length, each group's means over its
own answers only; a folder that is not a run is one line and exit code 2."""
import json

import pytest


def _answer(length, policy, score, tps, kv):
    return {"task": "niah_single", "length": length, "item": 0, "regime": "prefill", "policy": policy,
            "ratio": 0.5, "score": score, "tokens_per_s": tps, "kv_bytes": kv}


def test_each_length_keeps_its_own_answers(load_benchmark, tmp_path, capsys):
    rows = [_answer(2048, "sinks", 1.0, 10.0, 2**20), _answer(2048, "sinks", 0.0, 20.0, 3 * 2**20),
            _answer(4096, "sinks", 1.0, 5.0, 8 * 2**20)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({"command": "c", "machine": "m", "answers": rows}))
    bench = load_benchmark("kv_leaderboard_lengths")
    assert bench.main([str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    got = json.loads((tmp_path / "out" / "result.json").read_text())["lengths"]
    assert got["2048"]["prefill"]["sinks"]["0.5"] == {"score": 0.5, "n": 2, "tokens_per_s": 15.0, "kv_mib": 2.0}
    assert got["4096"]["prefill"]["sinks"]["0.5"] == {"score": 1.0, "n": 1, "tokens_per_s": 5.0, "kv_mib": 8.0}


def test_a_folder_without_a_run_is_one_line(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("kv_leaderboard_lengths")
    (tmp_path / "metrics.json").write_text('{"claims": []}')
    with pytest.raises(SystemExit) as e:
        bench.main([str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "not a kv-leaderboard run's metrics" in err[0]
