"""benchmarks/host.py's --out: what a benchmark prints is kept with its command, and only once it finished."""
import argparse
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def host(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import host as module

    return module


def test_recorded_keeps_the_printed_report_the_command_and_the_figures(host, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "bench_x.py"), "--out", "r"])
    with host.recorded(tmp_path / "r", figures := {}):
        print("| cache | tok/s |\n|---|---|\n| sinks | 15.7 |")
        figures["tok_s"] = 15.7
    assert "| sinks | 15.7 |" in capsys.readouterr().out  # still printed
    md = (tmp_path / "r" / "result.md").read_text()
    kept = json.loads((tmp_path / "r" / "result.json").read_text())
    assert "| sinks | 15.7 |" in md and "bench_x.py --out r" in md
    assert kept["tok_s"] == 15.7 and kept["command"].endswith("bench_x.py --out r") and kept["machine"]
    assert sorted(f.name for f in (tmp_path / "r").iterdir()) == ["result.json", "result.md"]  # no temporary left


def test_a_benchmark_that_fails_leaves_the_previous_result_as_it_was(host, tmp_path):
    out = tmp_path / "r"
    with host.recorded(out):
        print("first")
    before, stdout = (out / "result.md").read_text(), sys.stdout
    with pytest.raises(RuntimeError), host.recorded(out):
        print("second, half done")
        raise RuntimeError("killed")
    assert (out / "result.md").read_text() == before and sys.stdout is stdout


def test_out_naming_a_file_is_refused_by_the_parser(host, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    ap = argparse.ArgumentParser()
    host.add_out(ap)
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--out", str(tmp_path / "f")])
    assert e.value.code == 2 and "name a folder" in capsys.readouterr().err
    assert ap.parse_args([]).out is None
