"""Every benchmark reads its command line through benchmarks/host.py: a number out of its range (NaN included),
an unknown name, a missing text, folder or tool is one line and exit code 2 before any work (the function that
would start the work fails the test if it is reached)."""
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


class Started(AssertionError):
    """The benchmark reached its work."""


def _poisoned(load_benchmark, monkeypatch, script, work):
    """The script as a module, with ``work`` (a name in it, or dotted: ``torch.manual_seed``) raising Started."""
    module = load_benchmark(script)
    *path, name = work.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)

    def started(*a, **k):
        raise Started(f"{script}: {work} ran")

    monkeypatch.setattr(owner, name, started)
    return module


def _refused(load_benchmark, monkeypatch, capsys, script, argv, work) -> str:
    module = _poisoned(load_benchmark, monkeypatch, script, work)
    with pytest.raises(SystemExit) as e:
        module.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and ": error: " in err[0], err
    return err[0]


@pytest.mark.parametrize("script, argv, work, fragment", [
    # the cases
    ("bench_view", ["--tokens", "0"], "run_view", "argument --tokens: '0': give a whole number in [1, 2048]"),
    ("bench_view", ["--chunks", "abc"], "run_view", "argument --chunks: 'abc': comma-separated, each a whole number"),
    ("bench_view", ["--switches", "-1"], "run_view", "argument --switches: '-1': give a whole number >= 1"),
    ("bench_int8", ["--rounds", "0"], "torch.manual_seed", "argument --rounds: '0'"),
    ("bench_decode", ["--steps", "-1"], "load_model_and_tokenizer", "argument --steps: '-1'"),
    ("int8_errors", ["--tokens", "0"], "load_model", "argument --tokens: '0': give a whole number >= 2"),
    ("bench_sparse_mlp", ["--quick", "--rank", "0"], "run", "argument --rank: '0'"),
    # NaN and infinity, which pass a plain `x < lo` check
    ("bench_sparse_mlp", ["--overlap", "nan"], "run", "argument --overlap: 'nan': give a number in [0, 1]"),
    ("rope_extrapolation_base", ["--lr", "inf"], "read_corpus", "argument --lr: 'inf': give a number > 0"),
    ("bench_fig6_sweep", ["--naive-runs", "641"], "run", "give a whole number in [1, 640]"),
    # names, with the registries' did-you-mean
    ("bench_stream_loop", ["--device", "cpu", "--config", "smolm2"], "random_llama",
     "unknown config 'smolm2': did you mean 'smollm2'?"),
    ("bench_probes", ["--probes", "sink,heavy-hitters"], "run", "unknown probe 'sink': did you mean 'sinks'?"),
    ("time_experiments", ["scansnap-fig6", "--modes", "ful"], "timed", "unknown mode 'ful': did you mean 'full'?"),
    ("time_experiments", ["scansnap-fig5"], "timed", "unknown experiment 'scansnap-fig5': did you mean"),
    ("streameval_fresh", ["--model", "smolm2"], "run", "unknown model 'smolm2': did you mean smollm2?"),
    # what the run would reach only after a model load
    ("bench_kv_decode", ["--text", "nope.txt"], "run", "text=nope.txt: no such file"),
    ("bench_kv_decode", ["--budget", "4"], "run", "argument --budget: sinks: budget 4 leaves no room"),
    ("stream_restart", ["--start", "100", "--tokens", "50"], "run", "need --start below --tokens - 1"),
    ("bench_step_profile", ["--scheme", "w8a9"], "load_model_and_tokenizer",
     "unknown weight quantization 'w8a9': did you mean 'w8a8'?"),
    ("bench_step_levers", ["--repeats", "0"], "load_model_and_tokenizer", "argument --repeats: '0'"),
    ("bench_kv_compiled", ["--length", "512"], "run", "--length 512 must exceed --budget 1024"),
    ("bench_kv_compiled", ["--wrapper", "c"], "run", "argument --wrapper: invalid choice: 'c'"),
    ("bench_step_profile", ["--repeats", "0"], "load_model_and_tokenizer", "argument --repeats: '0'"),
])
def test_a_bad_argument_is_one_line_before_any_work(load_benchmark, monkeypatch, capsys, script, argv, work,
                                                    fragment):
    assert fragment in _refused(load_benchmark, monkeypatch, capsys, script, argv, work)


ROOT = BENCHMARKS.parent


@pytest.mark.parametrize("script, argv, work", [
    ("bb_eviction", [], "read_corpus"),
    ("bench_decode", [], "load_model_and_tokenizer"),
    ("bench_fig6_sweep", [], "run"),
    ("bench_int8", ["--no-torchao"], "torch.manual_seed"),
    ("bench_kv_compiled", [], "run"),
    ("bench_kv_decode", [], "run"),
    ("bench_long_context", [], "run"),
    ("bench_probes", [], "run"),
    ("bench_sparse_mlp", ["--device", "cpu"], "run"),
    ("bench_step_levers", [], "load_model_and_tokenizer"),
    ("bench_step_profile", [], "load_model_and_tokenizer"),
    ("bench_stream_loop", ["--device", "cpu"], "random_llama"),
    pytest.param("bench_sweep", [], "run", marks=pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="ray is not installed")),
    ("bench_trainer_throughput", [], "run"),
    pytest.param("bench_view", [], "run_view", marks=pytest.mark.skipif(
        shutil.which("chromium") is None or importlib.util.find_spec("playwright") is None,
        reason="no chromium or playwright here")),
    ("code_stats", ["--src", str(ROOT / "src" / "attnlab")], "run"),
    ("gpu_smoke", ["--device", "cpu"], "random_model"),
    ("int8_errors", [], "load_model"),
    ("joma_wikitext_readings", [str(ROOT)], "run_folders"),
    ("rope_extrapolation_base", [], "read_corpus"),
    ("stream_restart", [], "run"),
    ("streameval_fresh", [], "run"),
    ("time_experiments", ["scansnap-fig6"], "timed"),
])
def test_the_defaults_pass_the_checks(load_benchmark, monkeypatch, script, argv, work):
    """The checks refuse only what is wrong: each script's defaults reach its work."""
    with pytest.raises(Started):
        _poisoned(load_benchmark, monkeypatch, script, work).main(argv)


def test_a_missing_tool_is_named_before_any_work(load_benchmark, monkeypatch, capsys):
    import host

    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    line = _refused(load_benchmark, monkeypatch, capsys, "bench_view", [], "run_view")
    assert "chromium is not on PATH: install Debian's chromium" in line
    monkeypatch.setattr(host.importlib.util, "find_spec", lambda name: None)
    line = _refused(load_benchmark, monkeypatch, capsys, "bench_int8", [], "torch.manual_seed")
    assert "torchao is not installed: pip install 'attnlab[bench]', or leave it out with --no-torchao" in line
    line = _refused(load_benchmark, monkeypatch, capsys, "bench_sweep", [], "run")
    assert "ray is not installed: pip install 'attnlab[sweep]'" in line


def test_compare_metrics_refuses_folders_that_are_missing_or_hold_no_metrics(load_benchmark, monkeypatch, capsys,
                                                                              tmp_path):
    line = _refused(load_benchmark, monkeypatch, capsys, "compare_metrics",
                    [str(tmp_path / "before"), str(tmp_path / "after")], "diff")
    assert f"{tmp_path / 'before'}: no such folder" in line
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    line = _refused(load_benchmark, monkeypatch, capsys, "compare_metrics",
                    [str(tmp_path / "before"), str(tmp_path / "after")], "diff")
    assert "holds no metrics.json" in line


def test_compare_metrics_still_compares(load_benchmark, tmp_path, capsys):
    compare = load_benchmark("compare_metrics")
    for side, value in (("before", 1.0), ("after", 1.0), ("changed", 2.0)):
        (tmp_path / side / "run").mkdir(parents=True)
        (tmp_path / side / "run" / "metrics.json").write_text(f'{{"ppl": {value}, "seconds": 3}}')
    assert compare.main([str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    assert compare.main([str(tmp_path / "before"), str(tmp_path / "changed")]) == 1
    assert "run.ppl: 1.0 -> 2.0" in capsys.readouterr().out


def test_the_checks_accept_what_they_should(load_benchmark):
    host = load_benchmark("host")
    assert host.positive_int("3") == 3 and host.natural("0") == 0 and host.fraction("0.5") == 0.5
    assert host.positive_ints("8, 1") == (8, 1) and host.number(int, "[1, 640]")("640") == 640
    assert host.one_of(("full", "quick"), "mode", many=True)("quick,full") == ("quick", "full")
    for check, text in ((host.positive_int, "1.5"), (host.positive, "nan"), (host.fraction, "1.01"),
                        (host.positive_ints, "8,,1"), (host.natural, "-1")):
        with pytest.raises(host.argparse.ArgumentTypeError):
            check(text)


def test_every_benchmark_reads_its_arguments_through_host():
    """No script builds its own parser (a usage block before its error) or takes a number as a bare int or float
    (no range, NaN accepted): the class of failure the checks above catch cannot come back in a new script."""
    for script in sorted(BENCHMARKS.glob("*.py")):
        code = script.read_text()
        if script.name == "host.py" or "add_argument" not in code:
            continue
        assert "ArgumentParser(" not in code, f"{script.name}: build the parser with host.parser"
        assert not re.search(r"\btype=(int|float)\b", code), f"{script.name}: give numbers a host.number type"
