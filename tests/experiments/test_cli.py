"""The `attnlab` command line: listing, the run-folder contract, bad input, atomic output, demo."""
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlab import cli
from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments import registry

EXPERIMENTS = ("scansnap-fig4", "scansnap-fig6", "scansnap-theorems", "joma-invariants", "joma-linear", "joma-nonlinear",
               "joma-cooccurrence", "joma-hierarchy")
CLAIM_KEYS = {"claim", "measured", "expected", "tolerance", "holds"}


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code, err, fragment=None):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("attnlab: error:"), err
    assert "Traceback" not in err
    if fragment is not None:
        assert fragment in lines[0], err


def leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if ".partial" in p.name or ".old" in p.name)


def test_help_as_module_subprocess():
    p = subprocess.run([sys.executable, "-m", "attnlab", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "reproduce" in p.stdout and "demo" in p.stdout
    assert p.stderr == ""


def test_reproduce_list(capsys):
    code, out, err = run(["reproduce", "--list"], capsys)
    assert code == 0 and err == ""
    lines = out.strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    assert set(EXPERIMENTS) <= set(names) and names == sorted(names)
    for ln in lines:
        assert len(ln.split(maxsplit=1)) == 2  # name and a one-line summary


# --------------------------------------------------------------------------- the contract
@pytest.fixture(scope="module")
def fig4_run(tmp_path_factory):
    parent = tmp_path_factory.mktemp("fig4")
    out_dir = parent / "run"
    code = cli.main(["reproduce", "scansnap-fig4", "--out", str(out_dir), "--set", "sgd.steps=12"])
    return code, parent, out_dir


def test_fig4_writes_the_contract(fig4_run):
    code, parent, out_dir = fig4_run
    assert code == 0
    names = {p.name for p in out_dir.iterdir()}
    assert {"config.json", "metrics.json", "fig4.png", "report.md"} <= names
    assert (out_dir / "fig4.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    config = json.loads((out_dir / "config.json").read_text())
    assert config["experiment"] == "scansnap-fig4"
    assert config["sgd"]["steps"] == 12
    assert config["sgd"]["init"] == "zero"  # the experiment's own default kept beside the override
    assert config["device"] == "cpu"

    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["experiment"] == "scansnap-fig4"
    assert metrics["claims"]
    for c in metrics["claims"]:
        assert CLAIM_KEYS <= set(c)
        assert isinstance(c["holds"], bool)
        # holds is recomputable from the other fields by the named rule
        assert check(c["claim"], c["measured"], c["expected"], c["tolerance"], c["test"]).holds == c["holds"]
    assert metrics["all_hold"] == all(c["holds"] for c in metrics["claims"])
    assert metrics["steps_shown"][-1] == 12

    report = (out_dir / "report.md").read_text()
    assert report.startswith("# scansnap-fig4")
    assert "fig4.png" in report and report.count("✓") + report.count("✗") == len(metrics["claims"])
    assert leftovers(parent) == []


def test_fig6_rows(tmp_path, capsys):
    out_dir = tmp_path / "fig6"
    code, out, err = run(["reproduce", "scansnap-fig6", "--out", out_dir, "--seeds", "2", "--set", "num_last=1,3",
                          "--set", "eta_z=1,2", "--set", "ratio=1,10", "--set", "sgd.steps=5"], capsys)
    assert code == 0, err
    metrics = json.loads((out_dir / "metrics.json").read_text())
    rows = metrics["rows"]
    assert len(rows) == 2 * 2 * 2
    keys = {"num_last", "eta_z", "ratio", "entropy_mean", "entropy_std", "n_seeds"}
    for r in rows:
        assert set(r) == keys
        assert r["n_seeds"] == 2
        assert 0 <= r["entropy_mean"] <= 10 and r["entropy_std"] >= 0
    cells = {(r["num_last"], r["eta_z"], r["ratio"]) for r in rows}
    assert cells == {(n, e, q) for n in (1, 3) for e in (1.0, 2.0) for q in (1.0, 10.0)}
    config = json.loads((out_dir / "config.json").read_text())
    assert config["seeds"] == 2 and config["num_last"] == [1, 3] and config["sgd"]["steps"] == 5
    assert (out_dir / "fig6.png").exists()


# --------------------------------------------------------------------------- bad input
BAD = [
    (["reproduce", "scansnap-fig5", "--out", "X"], "did you mean 'scansnap-fig"),
    (["reproduce", "scansnap-fig6", "--out", "X", "--set", "eta_z=-1"], "eta_z"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "eta_z=-1"], "eta_z"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "data.num_last=0"], "num_last"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "data.T=1"], "T=1"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "sgd.stesp=3"], "did you mean 'sgd.steps'"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "no_such_key=3"], "unknown config key"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "sgd.steps=lots"], "sgd.steps"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--set", "sgd.steps"], "KEY=VALUE"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--seeds", "2"], "--seeds"),
    (["reproduce", "scansnap-fig6", "--out", "X", "--seeds", "0"], "--seeds"),
    (["reproduce", "scansnap-fig4", "--out", "X", "--device", "tpu"], "cpu or cuda"),
    (["reproduce", "scansnap-fig4"], "--out"),
    (["reproduce", "joma-invariants", "--out", "X", "--set", "hidden=7"], "set K=20 or use head=linear"),
    (["reproduce", "joma-invariants", "--out", "X", "--set", "d=12"], "d >= 21"),
    (["reproduce", "joma-invariants", "--out", "X", "--set", "embedding=nowhere.npy"], "no such file"),
    (["reproduce", "joma-invariants", "--out", "X", "--set", "corr_steps=500,9000"], "corr_steps"),
    (["reproduce", "joma-linear", "--out", "X", "--set", "components=1"], "components=1"),
    (["reproduce", "joma-nonlinear", "--out", "X", "--set", "v0=9"], "v0=9"),
    (["reproduce", "joma-cooccurrence", "--out", "X", "--set", "tree.height=40"], "max_vocab"),
    (["reproduce", "joma-cooccurrence", "--out", "X", "--set", "tree.vocab_size=10"], "vocab"),
    (["reproduce", "joma-hierarchy", "--out", "X", "--set", "data.seq_len=3"], "seq_len"),
    (["reproduce"], "name an experiment"),
    (["frobnicate"], None),
]


@pytest.mark.parametrize("argv,fragment", BAD, ids=[" ".join(a[1:3]) + f"#{i}" for i, (a, _) in enumerate(BAD)])
def test_bad_input_is_one_line_exit_2(argv, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(argv, capsys)
    assert_usage_error(code, err, fragment)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a staging folder


def test_non_orthonormal_embedding_is_refused(tmp_path, capsys):
    U = np.eye(30, 21)
    U[0, 1] = 0.5  # columns 0 and 1 now overlap
    np.save(tmp_path / "U.npy", U)
    code, _, err = run(["reproduce", "joma-invariants", "--out", tmp_path / "r", "--set",
                        f"embedding={tmp_path / 'U.npy'}"], capsys)
    assert_usage_error(code, err, "not orthonormal")
    assert not (tmp_path / "r").exists()


def test_unknown_experiment_hint_names_the_closest(capsys, tmp_path):
    code, _, err = run(["reproduce", "scansnap-fig5", "--out", tmp_path / "r"], capsys)
    assert_usage_error(code, err)
    assert any(f"scansnap-fig{n}" in err for n in (4, 6, 7))
    assert "--list" in err


def test_config_errors_are_usage_errors_not_tracebacks(capsys, tmp_path):
    """ConfigError (raised inside dataclass validation) reaches the CLI's handler."""
    with pytest.raises(ConfigError):
        registry.get("scansnap-fig4").config_cls(eta_z=-1.0)
    code, _, err = run(["reproduce", "scansnap-fig6", "--out", tmp_path / "r", "--set", "ratio=0"], capsys)
    assert_usage_error(code, err, "ratio")


def test_unwritable_out(tmp_path, capsys):
    if os.geteuid() == 0:  # root ignores permission bits: use a path whose parent is a file
        blocker = tmp_path / "a_file"
        blocker.write_text("I am a file")
        target = blocker / "run"
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = ro / "run"
    try:
        code, _, err = run(["reproduce", "scansnap-fig4", "--out", target, "--set", "sgd.steps=2"], capsys)
    finally:
        if os.geteuid() != 0:
            (tmp_path / "ro").chmod(0o700)
    assert_usage_error(code, err, "--out")
    assert not target.exists()


def test_out_is_an_existing_file(tmp_path, capsys):
    f = tmp_path / "f.txt"
    f.write_text("keep me")
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", f, "--set", "sgd.steps=2"], capsys)
    assert_usage_error(code, err, "is a file")
    assert f.read_text() == "keep me"


def test_cuda_unavailable(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "r", "--device", "cuda"], capsys)
    assert_usage_error(code, err, "--device cpu")
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- atomic output
def test_failed_run_keeps_the_previous_run(fig4_run, capsys):
    code, parent, out_dir = fig4_run
    assert code == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    for bad in (["--set", "eta_z=-1"], ["--set", "data.num_last=0"], ["--set", "data.T=1"], ["--device", "tpu"]):
        c, _, err = run(["reproduce", "scansnap-fig4", "--out", out_dir, *bad], capsys)
        assert_usage_error(c, err)
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before
    assert leftovers(parent) == []


@pytest.mark.parametrize(
    "exc,code_wanted,fragment",
    [(ConfigError("something the user can fix"), 2, "something the user can fix"), (KeyboardInterrupt(), 130, "interrupted")],
)
def test_error_during_the_run_keeps_the_previous_run(exc, code_wanted, fragment, tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "run"
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)[0] == 0
    before = (out_dir / "metrics.json").read_bytes()
    exp = registry.get("scansnap-fig4")

    def fails_halfway(cfg, ctx):
        (ctx.out / "fig4.png").write_bytes(b"half-written")
        (ctx.out / "metrics.json").write_text("{}")
        raise exc

    monkeypatch.setitem(registry._REGISTRY, exp.name, dataclasses.replace(exp, run=fails_halfway))
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", out_dir], capsys)
    assert code == code_wanted and fragment in err and len(err.strip().splitlines()) == 1
    assert (out_dir / "metrics.json").read_bytes() == before
    assert (out_dir / "fig4.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no .partial / .old folders


def test_rerun_replaces_a_previous_run(tmp_path, capsys):
    out_dir = tmp_path / "run"
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)[0] == 0
    (out_dir / "stale.txt").write_text("from the old run")
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=3"], capsys)[0] == 0
    assert json.loads((out_dir / "config.json").read_text())["sgd"]["steps"] == 3
    assert not (out_dir / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_folder_with_unrelated_files_is_refused(tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    (target / "sub").mkdir()
    (target / "sub" / "data.bin").write_bytes(b"\x00\x01")
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", target, "--set", "sgd.steps=2"], capsys)
    assert_usage_error(code, err, "other files")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt", "sub"]
    assert (target / "notes.txt").read_text() == "precious"
    assert (target / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert leftovers(tmp_path) == []


def test_empty_existing_folder_is_accepted(tmp_path, capsys):
    target = tmp_path / "empty"
    target.mkdir()
    code, _, _ = run(["reproduce", "scansnap-fig4", "--out", target, "--set", "sgd.steps=2"], capsys)
    assert code == 0 and (target / "metrics.json").exists()


# --------------------------------------------------------------------------- demo
def test_demo_is_wired(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "DEMO_EXPERIMENTS", ("scansnap-fig4",))
    exp = registry.get("scansnap-fig4")
    monkeypatch.setitem(registry._REGISTRY, exp.name, dataclasses.replace(exp, quick={"sgd.steps": 5}))
    out_dir = tmp_path / "demo"
    code, out, err = run(["demo", "--out", out_dir], capsys)
    assert code == 0, err
    assert str(out_dir / "index.html") in out
    assert (out_dir / "report.md").exists() and (out_dir / "index.html").exists()
    sub = out_dir / "scansnap-fig4"
    assert {"config.json", "metrics.json", "report.md", "fig4.png"} <= {p.name for p in sub.iterdir()}
    assert json.loads((sub / "config.json").read_text())["sgd"]["steps"] == 5  # quick settings used
    claims = json.loads((sub / "metrics.json").read_text())["claims"]
    page = (out_dir / "index.html").read_text()
    assert page.count("✓") + page.count("✗") == len(claims)
    assert page.count("✓") == sum(c["holds"] for c in claims)
    assert "<img src='scansnap-fig4/fig4.png'" in page
    md = (out_dir / "report.md").read_text()
    assert "scansnap-fig4/report.md" in md and md.count("✓") + md.count("✗") == len(claims)
    assert leftovers(tmp_path) == []


def test_demo_full_ignores_quick_settings():
    """--full resolves each config without the quick overrides (checked without running it)."""
    from attnlab.experiments import runner

    exp = registry.get("scansnap-theorems")
    assert exp.quick  # theorems has quick settings
    quick = runner.resolve_config(exp, {}, None, quick=True)
    full = runner.resolve_config(exp, {}, None, quick=False)
    assert quick.t_max == exp.quick["t_max"] and full.t_max == exp.config_cls().t_max != quick.t_max


def test_demo_bad_device(tmp_path, capsys):
    code, _, err = run(["demo", "--out", tmp_path / "d", "--device", "gpu"], capsys)
    assert_usage_error(code, err, "cpu or cuda")
    assert not (tmp_path / "d").exists()


# --------------------------------------------------------------------------- the command line recorded; NaN and empty sweeps
def test_report_records_the_command_that_was_run(tmp_path, capsys):
    out_dir = tmp_path / "r"
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)[0] == 0
    assert "--set sgd.steps=2" in (out_dir / "report.md").read_text()


def test_nan_learning_rate_is_rejected(tmp_path, capsys):
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "r", "--set", "eta_z=nan",
                        "--set", "sgd.steps=2"], capsys)
    assert_usage_error(code, err)


def test_empty_sweep_axis_is_rejected(tmp_path, capsys):
    code, _, err = run(["reproduce", "scansnap-fig6", "--out", tmp_path / "r", "--set", "eta_z=",
                        "--set", "sgd.steps=2", "--seeds", "1", "--set", "num_last=1"], capsys)
    assert_usage_error(code, err)


def test_badly_typed_set_value(tmp_path, capsys):
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "r", "--set", "sgd.steps=many"], capsys)
    assert_usage_error(code, err, "type int")
    assert not (tmp_path / "r").exists()



def test_failed_run_removes_the_parent_folders_it_made(tmp_path, capsys, monkeypatch):
    exp = registry.get("scansnap-fig4")

    def fails(cfg, ctx):
        raise ConfigError("bad")

    monkeypatch.setitem(registry._REGISTRY, exp.name, dataclasses.replace(exp, run=fails))
    code, _, _ = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "a" / "b" / "run"], capsys)
    assert code == 2 and list(tmp_path.iterdir()) == []
