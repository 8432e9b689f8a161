"""`attnlab demo`: quick vs full settings, the talk's order, skipped experiments, --strict; fake experiments."""
import dataclasses
import importlib
import json

import pytest

from attnlab import cli
from attnlab.core.errors import MissingResource
from attnlab.core.registry import Registry
from attnlab.experiments import registry
from attnlab.experiments.claims import check, erratum, finding
from attnlab.experiments.registry import Result
from html_page import Page

PNG = b"\x89PNG\r\n\x1a\n"


@dataclasses.dataclass
class Cfg:
    steps: int = 100


@pytest.fixture
def fakes(monkeypatch):
    """An empty registry that finds no modules; ``add(...)`` registers a fake experiment in a package."""
    monkeypatch.setattr(registry, "EXPERIMENTS", Registry("experiment", "see `attnlab list`"))
    monkeypatch.setattr(registry, "experiment_modules", lambda: [])
    seen = []  # (name, steps) per run, in the order the demo ran them

    def add(name, module, claims=(), demo=True, missing=None):
        def run(cfg, ctx):
            seen.append((name, cfg.steps))
            if missing:
                raise MissingResource(missing)
            (ctx.out / "fig.png").write_bytes(PNG)
            return Result(list(claims) or [check(f"{name} holds", 1, 1, 0)], figures={"fig.png": f"{name} figure"})

        run.__module__ = module  # the part of the talk follows from it
        registry.register(name, f"{name}: one line", Cfg, quick={"steps": 3}, demo=demo)(run)

    add.seen = seen
    return add


def _talk(fakes):
    """Registered out of the talk's order: the demo must still run them in it."""
    fakes("a-kv", "attnlab.kv.exp_fake")
    fakes("b-joma", "attnlab.theory.joma.exp_fake",
          [check("b1", 1, 1, 0), check("b2", 0, 1, 0).because("too few steps"),
           check("b3", 1.0, 1.0, 0.1, interval=(0.8, 1.05), n=8).unresolved_because("8 seeds are too few")])
    fakes("c-scansnap", "attnlab.theory.scansnap.experiments")
    fakes("d-rope-slow", "attnlab.rope.exp_fake", demo=False)
    fakes("e-text", "attnlab.train.exp_fake", missing="needs a corpus: --set train=PATH")


def _demo(capsys, *argv):
    """The demo one experiment after the other (--jobs 1): the fakes live in this process's registry only."""
    code = cli.main(["demo", "--jobs", "1", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_quick_settings_apply_only_without_full(fakes, tmp_path, capsys):
    _talk(fakes)
    assert _demo(capsys, "--out", tmp_path / "quick")[0] == 0
    assert _demo(capsys, "--out", tmp_path / "full", "--full")[0] == 0
    ran = ["c-scansnap", "b-joma", "e-text", "a-kv"]  # talk order; demo=False is never run
    assert fakes.seen == [(n, 3) for n in ran] + [(n, 100) for n in ran]
    for folder, steps in (("quick", 3), ("full", 100)):
        assert json.loads((tmp_path / folder / "a-kv" / "config.json").read_text())["steps"] == steps
    cmd = (tmp_path / "quick" / "a-kv" / "report.md").read_text()
    assert "`attnlab reproduce a-kv --out a-kv --quick`" in cmd
    assert "--quick" not in (tmp_path / "full" / "a-kv" / "report.md").read_text()
    assert "full settings" in (tmp_path / "full" / "index.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "quick"]  # no staging folders left


def test_the_page_follows_the_talk(fakes, tmp_path, capsys):
    _talk(fakes)
    code, out, err = _demo(capsys, "--out", tmp_path / "d")
    assert code == 0, err
    page = Page((tmp_path / "d" / "index.html").read_text())
    rows = page.table("summary").body()
    assert [(r.cells[0], r.cells[1]) for r in rows] == [
        ("c-scansnap", "Scan&Snap"), ("b-joma", "JoMA"), ("a-kv", "KV-cache policies")]
    assert [r.cells[2:7] for r in rows] == [["1", "0", "0", "0", "0"], ["1", "1", "1", "0", "0"],
                                            ["1", "0", "0", "0", "0"]]
    assert [t for h, t in page.headings if h == "h2"] == ["Scan&Snap", "JoMA", "KV-cache policies"]
    (failed,) = [r for t in page.tables[1:] for r in t.body() if r.cls == "fails"]
    assert failed.cells[:2] == ["✗", "b2why it fails: too few steps"]
    (unresolved,) = [r for t in page.tables[1:] for r in t.body() if r.cls == "unresolved"]
    assert unresolved.cells[:3] == ["unresolved", "b3why unresolved: 8 seeds are too few", "1 [0.8, 1.05], n=8"]
    assert "| [b-joma](b-joma/report.md) | JoMA | 1 | 1 | 1 | 0 | 0 |" in (tmp_path / "d" / "report.md").read_text()
    assert page.items == ["e-text (real text): needs a corpus: --set train=PATH"]
    assert not (tmp_path / "d" / "e-text").exists()
    assert "- e-text: skipped (needs a corpus: --set train=PATH)" in (tmp_path / "d" / "report.md").read_text()
    assert ({"config.json", "metrics.json", "report.md", "fig.png"}
            <= {p.name for p in (tmp_path / "d" / "a-kv").iterdir()})
    assert "<img src='a-kv/fig.png'" in (tmp_path / "d" / "index.html").read_text()
    assert str(tmp_path / "d" / "index.html") in out
    assert "[demo] 1/4 c-scansnap (Scan&Snap)" in err and "e-text: skipped" in err


@pytest.mark.parametrize("claims,strict_code,line", [
    ([check("ok", 1, 1, 0), check("bad", 0, 1, 0)], 1, "attnlab demo: 1/2 claims hold, 1 fail in "),
    (erratum(check("as printed", 0, 1, 0), check("corrected", 1, 1, 0)) + [finding("seen", 0.5)], 0,
     "attnlab demo: 1/1 claims hold, 1 erratum, 1 finding in "),
    ([check("ok", 1, 1, 0), check("open", 1.0, 1.0, 0.1, interval=(0.8, 1.05), n=8)], 0,
     "attnlab demo: 1/2 claims hold, 1 unresolved in "),
])
def test_strict_fails_only_on_failing_claims(fakes, tmp_path, capsys, claims, strict_code, line):
    fakes("x", "attnlab.kv.exp_fake", claims)
    code, out, _ = _demo(capsys, "--out", tmp_path / "plain")
    assert code == 0 and out.startswith(line)
    code, out, err = _demo(capsys, "--out", tmp_path / "strict", "--strict")
    assert code == strict_code and out.startswith(line)
    assert ("--strict: 1 claim(s) fail" in err) == (strict_code == 1)
    assert (tmp_path / "strict" / "index.html").exists()  # the report is written either way


def test_bad_device_writes_nothing(tmp_path, capsys):
    code, _, err = _demo(capsys, "--out", tmp_path / "d", "--device", "gpu")
    assert code == 2 and err.startswith("attnlab: error:") and "cpu or cuda" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_real_demo_path_on_a_fast_experiment(tmp_path, capsys, monkeypatch):
    """scansnap-fig4 with 5 SGD steps through the real runner and report (about a second once
    scipy and matplotlib are imported; 2-3 s alone)."""
    importlib.import_module("attnlab.theory.scansnap.experiments")  # registers it without importing every module

    exp = dataclasses.replace(registry.EXPERIMENTS.get("scansnap-fig4"), quick={"sgd.steps": 5})
    monkeypatch.setattr(registry, "load_all", lambda: {exp.name: exp})
    code, out, err = _demo(capsys, "--out", tmp_path / "d")
    assert code == 0, err
    sub = tmp_path / "d" / "scansnap-fig4"
    assert json.loads((sub / "config.json").read_text())["sgd"]["steps"] == 5
    claims = json.loads((sub / "metrics.json").read_text())["claims"]
    rows = Page((tmp_path / "d" / "index.html").read_text()).table("claims").body()
    assert [r.cells[0] for r in rows] == ["✓" if c["holds"] else "✗" for c in claims]
    assert (sub / "fig4.png").read_bytes()[:8] == PNG
    assert "<img src='scansnap-fig4/fig4.png'" in (tmp_path / "d" / "index.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no staging folders left


def test_offline_demo_skips_what_needs_a_download_with_one_line_each(fakes, tmp_path, capsys, monkeypatch):
    """--offline: an experiment whose model is not cached is skipped, named with the command that fetches it;
    the others run. Without --offline the same demo would fetch (tested in tests/models/test_pretrained.py)."""
    from attnlab.evals.inputs import load_model

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv("ATTNLAB_OFFLINE")

    def needs_smollm2(cfg, ctx):
        load_model("smollm2")
        raise AssertionError("unreachable: the model is not cached and downloads are off")

    needs_smollm2.__module__ = "attnlab.kv.exp_fake"
    registry.register("f-model", "needs SmolLM2", Cfg, demo=True)(needs_smollm2)
    fakes("c-scansnap", "attnlab.theory.scansnap.experiments")
    code, out, err = _demo(capsys, "--out", tmp_path / "d", "--offline")
    assert code == 0
    (line,) = [x for x in err.splitlines() if "f-model: skipped" in x]
    assert "downloads are off" in line and "attnlab models fetch smollm2" in line
    report = (tmp_path / "d" / "report.md").read_text()
    assert "- f-model: skipped (model smollm2 is not in the cache and downloads are off" in report
    assert (tmp_path / "d" / "c-scansnap" / "metrics.json").is_file() and not (tmp_path / "d" / "f-model").exists()


@pytest.mark.slow
def test_two_at_a_time_gives_the_same_claims_in_the_talks_order(tmp_path, capsys, monkeypatch):
    """--jobs 2 runs real experiments in worker processes of one thread each: the same claims and verdicts as
    one after the other, reported in the talk's order whatever order they finish in."""
    from attnlab.experiments import demo

    monkeypatch.setattr(demo, "DEMO_EXPERIMENTS", ("scansnap-fig4", "joma-linear", "joma-nonlinear"))
    claims = {}
    for jobs in (1, 2):
        assert cli.main(["demo", "--jobs", str(jobs), "--out", str(tmp_path / f"j{jobs}")]) == 0
        claims[jobs] = {n: json.loads((tmp_path / f"j{jobs}" / n / "metrics.json").read_text())["claims"]
                        for n in demo.DEMO_EXPERIMENTS}
    for n in demo.DEMO_EXPERIMENTS:
        assert [(c["claim"], c["status"]) for c in claims[1][n]] == [(c["claim"], c["status"]) for c in claims[2][n]]
        for a, b in zip(claims[1][n], claims[2][n]):  # one thread may round differently from two, no more
            assert a["measured"] == pytest.approx(b["measured"], rel=1e-6, abs=1e-9)
    report = (tmp_path / "j2" / "report.md").read_text()
    assert [report.index(f"[{n}]") for n in demo.DEMO_EXPERIMENTS] == sorted(report.index(f"[{n}]")
                                                                          for n in demo.DEMO_EXPERIMENTS)
    err = capsys.readouterr().err
    assert "--jobs" not in err and "scansnap-fig4 done" in err


def test_jobs_below_one_is_one_line_and_exit_2(tmp_path, capsys):
    code, out, err = _demo(capsys, "--jobs", "0", "--out", tmp_path / "d")  # _demo's --jobs 1 is overridden
    assert code == 2 and "--jobs 0" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "d").exists()


def test_the_summary_says_which_experiments_decided_no_claim(fakes, tmp_path, capsys):
    """A reader sees at once where the demo has no verdict: an experiment whose claims are all unresolved or
    findings is named; with a verdict everywhere, the summary says so."""
    fakes("a-kv", "attnlab.kv.exp_fake")
    fakes("b-joma", "attnlab.theory.joma.exp_fake",
          [check("b1", 1.0, 1.0, 0.1, interval=(0.8, 1.05), n=8), finding("b2", 3.0)])
    _demo(capsys, "--out", tmp_path / "d")
    report = (tmp_path / "d" / "report.md").read_text()
    assert "No claim decided in 1 of 2 experiments: b-joma." in report
    assert "No claim decided in 1 of 2 experiments: b-joma." in (tmp_path / "d" / "index.html").read_text()
    fakes("c-scansnap", "attnlab.theory.scansnap.experiments", erratum(check("p", 0, 1, 0), check("c", 1, 1, 0)))
    registry.EXPERIMENTS._items.pop("b-joma")
    _demo(capsys, "--out", tmp_path / "e")
    assert "Every experiment decided at least one claim." in (tmp_path / "e" / "report.md").read_text()


def test_runs_start_every_core_ones_first_then_longest_first():
    """The pool's start order: runs that need every core while all are free, then the longest-processing-time
    rule over the rest (so no long run finishes alone at the end); the talk's order breaks no tie it needs."""
    from attnlab.experiments import demo_pool, registry, runner

    exps = [e for e in registry.load_all().values() if e.demo]
    need = {e.name: demo_pool.cores_needed(runner.resolve_config(e, {}, None, quick=True)) for e in exps}
    order = [e.name for e in demo_pool.schedule(exps, need)]
    alone = [n for n in order if need[n] > 1]
    assert alone and order[:len(alone)] == alone  # the sink runs start workers of their own
    cost = [demo_pool.QUICK_SECONDS.get(n, demo_pool.UNLISTED_SECONDS) for n in order[len(alone):]]
    assert cost == sorted(cost, reverse=True) and order[len(alone)] == "accuracy-table"
    assert sorted(order) == sorted(e.name for e in exps)
    assert set(demo_pool.QUICK_SECONDS) <= {e.name for e in exps}  # no stale name in the table
