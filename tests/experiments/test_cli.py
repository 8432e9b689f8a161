"""The `attnlab` command line: discovery, grouped help, listing in the talk's order, the run-folder
contract, bad input, atomic output."""
import argparse
import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnlab
from attnlab import cli
from attnlab.core import io
from attnlab.core.errors import ConfigError
from attnlab.core.machine import machine
from attnlab.core.registry import Registry
from attnlab.experiments import registry
from attnlab.experiments.claims import STATUSES, check, erratum, finding

EXPERIMENTS = ("scansnap-fig4", "scansnap-fig6", "scansnap-theorems", "joma-invariants", "joma-linear",
               "joma-nonlinear", "joma-cooccurrence", "joma-hierarchy")
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


def with_run(monkeypatch, name=None, run_fn=None):
    """A copy of the registry for this test (what it registers is gone after it), with experiment
    ``name`` running ``run_fn`` instead."""
    patched = Registry("experiment", "see `attnlab list`")
    for n, exp in registry.load_all().items():
        patched.add(n, dataclasses.replace(exp, run=run_fn) if n == name else exp)
    monkeypatch.setattr(registry, "EXPERIMENTS", patched)


@pytest.mark.slow
def test_help_as_module_subprocess():
    p = subprocess.run([sys.executable, "-m", "attnlab", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "reproduce" in p.stdout and "demo" in p.stdout
    assert p.stderr == ""


def _help_sections(text):
    """heading -> the command names listed under it, from `attnlab --help`."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.endswith(" commands:"):
            current = sections.setdefault(line[: -len(" commands:")], [])
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.split()[0])
        else:
            current = None
    return sections


def test_help_groups_the_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    sections = _help_sections(capsys.readouterr().out)
    assert list(sections) == ["theory and experiments", "training", "inference", "models"]
    assert {"demo", "list", "reproduce"} <= set(sections["theory and experiments"])
    assert sections["training"] == ["train"]
    assert {"stream", "passkey", "longppl"} <= set(sections["inference"])
    assert "models" in sections["models"]


def test_every_capability_cli_is_found_and_every_command_dispatches():
    found = cli.capability_clis()
    assert {"attnlab.experiments.cli", "attnlab.kv.cli", "attnlab.rope.cli", "attnlab.train.cli",
            "attnlab.models.cli"} <= set(found)
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert callable(p.get_default("func")), name  # main dispatches on it; no if-chain to forget


def test_a_new_capability_is_found_without_editing_a_list(tmp_path, monkeypatch, capsys):
    """A package with cli.py and experiments.py: its command appears in --help under its GROUP and
    runs; its experiment appears in `attnlab list` under its package's name, after the talk's parts."""
    pkg = tmp_path / "lens"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""A capability made up for this test."""\n')
    (pkg / "cli.py").write_text(
        '"""attnlab lens"""\nGROUP = "inference"\n\n'
        "def add_commands(sub):\n"
        '    sub.add_parser("lens", help="a made-up command").set_defaults(func=lambda args: 7)\n')
    (pkg / "experiments.py").write_text(
        '"""a made-up experiment"""\nimport dataclasses\n'
        "from attnlab.experiments.registry import Result, register\n\n"
        "@dataclasses.dataclass\nclass Cfg:\n    x: int = 1\n\n"
        '@register("lens-exp", "a made-up experiment", Cfg)\n'
        "def run(cfg, ctx):\n    return Result([])\n")
    with_run(monkeypatch)
    monkeypatch.setattr(attnlab, "__path__", [*attnlab.__path__, str(tmp_path)])
    try:
        assert "attnlab.lens.cli" in cli.capability_clis()
        assert "attnlab.lens.experiments" in registry.experiment_modules()
        assert cli.main(["lens"]) == 7
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert "lens" in _help_sections(capsys.readouterr().out)["inference"]
        assert registry.load_all()["lens-exp"].part == "lens"
        listing = run(["list"], capsys)[1].rstrip().splitlines()
        assert listing[-2:] == ["lens", "  lens-exp               a made-up experiment"]  # after the talk's parts
    finally:
        for name in [m for m in sys.modules if m.startswith("attnlab.lens")]:
            del sys.modules[name]


def _listing(out):
    """(part, [names]) in the order `attnlab list` prints them."""
    parts = []
    for line in out.splitlines():
        if line and not line.startswith(" "):
            parts.append((line, []))
        elif line.strip():
            parts[-1][1].append(line.split()[0])
    return parts


def test_list_follows_the_talk(capsys):
    code, out, err = run(["list"], capsys)
    assert code == 0 and err == ""
    parts = _listing(out)
    talk = ["Scan&Snap", "JoMA", "real text", "probes: inside a pretrained model", "KV-cache policies",
            "attention sinks from scratch", "what eviction forgets", "RoPE scaling"]
    assert [p for p, _ in parts][:8] == talk
    names = dict(parts)
    assert names["Scan&Snap"] == ["scansnap-fig4", "scansnap-fig6", "scansnap-theorems", "scansnap-theorem4-sweep"]
    assert set(names["JoMA"]) == {"joma-invariants", "joma-invariants-coupling", "joma-linear", "joma-nonlinear",
                                  "joma-cooccurrence", "joma-hierarchy", "joma-hierarchy-controls"}
    assert names["real text"] == ["scansnap-fig7", "joma-wikitext"]
    # a package's experiments module first, then its exp_* modules by name; the commands are experiments too
    assert names["probes: inside a pretrained model"] == ["probes", "probe"]
    assert names["KV-cache policies"] == ["streaming-ppl", "h2o-ppl", "stream"]
    assert names["RoPE scaling"] == ["passkey", "rope-zero-shot", "pi-finetune", "longppl"]
    assert [n for _, ns in parts for n in ns] == list(registry.load_all())


@pytest.mark.parametrize("module, part", [
    ("attnlab.theory.scansnap.experiments", "Scan&Snap"), ("attnlab.theory.joma.exp_ode_linear", "JoMA"),
    ("attnlab.train.exp_fig7", "real text"), ("attnlab.kv.experiments", "KV-cache policies"),
    ("attnlab.rope.exp_pi_finetune", "RoPE scaling"), ("attnlab.sparse.experiments", "sparse"),
    ("attnlab.lens.deep.exp_x", "lens"), ("attnlab.probes.experiments", "probes: inside a pretrained model")])
def test_the_part_of_the_talk_follows_the_module(module, part):
    assert registry.part_of(module) == part


def test_experiments_are_discovered_not_listed():
    modules = registry.experiment_modules()
    assert {"attnlab.theory.scansnap.experiments", "attnlab.theory.joma.exp_ode_linear", "attnlab.train.exp_fig7",
            "attnlab.kv.experiments", "attnlab.rope.experiments", "attnlab.rope.exp_pi_finetune"} <= set(modules)
    assert all(m.rsplit(".", 1)[1] == "experiments" or m.rsplit(".", 1)[1].startswith("exp_") for m in modules)
    assert not hasattr(registry, "EXPERIMENT_MODULES")


def test_reproduce_list(capsys):
    code, out, err = run(["reproduce", "--list"], capsys)
    assert code == 0 and err == ""
    lines = out.strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    assert set(EXPERIMENTS) <= set(names) and names == list(registry.load_all())  # the talk's order
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
    assert metrics["all_hold"] == (metrics["claim_counts"]["fails"] == 0)
    assert metrics["claim_counts"] == {s: sum(c["status"] == s for c in metrics["claims"])
                                       for s in STATUSES}
    assert metrics["steps_shown"][-1] == 12
    # the machine it ran on: a run is bit-reproducible only on the same CPU kernels
    assert metrics["machine"] == machine() and f"torch {torch.__version__}" in metrics["machine"]

    report = (out_dir / "report.md").read_text()
    assert report.startswith("# scansnap-fig4") and f"s on {metrics['machine']}." in report
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
    assert "attnlab list" in err


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


@pytest.mark.slow
@pytest.mark.parametrize(
    "exc,code_wanted,fragment",
    [(ConfigError("something the user can fix"), 2, "something the user can fix"),
     (KeyboardInterrupt(), 130, "interrupted")],
)
def test_error_during_the_run_keeps_the_previous_run(exc, code_wanted, fragment, tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "run"
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)[0] == 0
    before = (out_dir / "metrics.json").read_bytes()
    def fails_halfway(cfg, ctx):
        (ctx.out / "fig4.png").write_bytes(b"half-written")
        (ctx.out / "metrics.json").write_text("{}")
        raise exc

    with_run(monkeypatch, "scansnap-fig4", fails_halfway)
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", out_dir], capsys)
    assert code == code_wanted and fragment in err and len(err.strip().splitlines()) == 1
    assert (out_dir / "metrics.json").read_bytes() == before
    assert (out_dir / "fig4.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no .partial / .old folders


@pytest.mark.slow
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


# ------------------------------------------------------------------ the command line recorded; NaN and empty sweeps
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
    def fails(cfg, ctx):
        raise ConfigError("bad")

    with_run(monkeypatch, "scansnap-fig4", fails)
    code, _, _ = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "a" / "b" / "run"], capsys)
    assert code == 2 and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- bad input at the end of a run
@pytest.mark.slow
def test_out_that_cannot_be_replaced_keeps_the_finished_run_and_says_where(tmp_path, capsys, monkeypatch):
    """--out a read-only mount point: the run finishes, the final rename fails (simulated: we run as root)."""
    def refuse(build, target):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(io, "swap_into_place", refuse)  # staged_dir's last rename
    out_dir = tmp_path / "mnt"
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)
    assert_usage_error(code, err, "the results are in")
    kept = next(p for p in tmp_path.iterdir() if p.name.startswith("mnt.finished-"))
    assert str(kept) in err and "Device or resource busy" in err
    assert {"config.json", "metrics.json", "report.md", "fig4.png"} <= {p.name for p in kept.iterdir()}
    assert leftovers(tmp_path) == []  # not hidden in a staging folder
    monkeypatch.undo()  # a later run does not remove the kept results
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir, "--set", "sgd.steps=2"], capsys)[0] == 0
    assert (kept / "metrics.json").exists()


def test_a_mount_point_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    target = tmp_path / "mnt"
    target.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(target))
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", target, "--set", "sgd.steps=2"], capsys)
    assert_usage_error(code, err, "mount point")
    assert str(target / "run") in err and list(target.iterdir()) == []


def _dead_pid():
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_staging_folders_of_killed_runs_are_removed(tmp_path, capsys):
    dead = tmp_path / f".run.partial-{_dead_pid()}-123"
    alive = tmp_path / f".run.partial-{os.getpid()}-456"  # another run of this process, still going
    other = tmp_path / f".other.partial-{_dead_pid()}-789"  # not this --out's
    for d in (dead, alive, other):
        d.mkdir()
        (d / "metrics.json").write_text("{}")
    assert run(["reproduce", "scansnap-fig4", "--out", tmp_path / "run", "--set", "sgd.steps=2"], capsys)[0] == 0
    assert not dead.exists() and alive.exists() and other.exists()


def test_metrics_are_strict_json(tmp_path, capsys, monkeypatch):
    """NaN (a diverged run, an undefined ratio) is written as null, never as bare NaN."""
    def nan_run(cfg, ctx):
        nan = float("nan")
        return registry.Result([check("a ratio", nan, 1.0, 0.1)], {"loss": nan, "inf": [float("inf")]})

    with_run(monkeypatch, "scansnap-fig4", nan_run)
    out_dir = tmp_path / "r"
    assert run(["reproduce", "scansnap-fig4", "--out", out_dir], capsys)[0] == 0
    text = (out_dir / "metrics.json").read_text()

    def refuse(name):
        raise AssertionError(f"bare {name} in metrics.json")

    m = json.loads(text, parse_constant=refuse)
    assert m["loss"] is None and m["inf"] == [None] and m["claims"][0]["measured"] is None
    assert m["claims"][0]["holds"] is False and m["claim_counts"]["fails"] == 1 and m["all_hold"] is False


@pytest.mark.parametrize("fails", [False, True])
def test_all_hold_means_no_claim_fails(tmp_path, capsys, monkeypatch, fails):
    """Errata and findings are not failures: all_hold is false only when a checked claim fails."""
    def claims_run(cfg, ctx):
        claims = [*erratum(check("as printed", 2.0, 1.0), check("corrected", 2.0, 2.0)), finding("a size", 3.0)]
        return registry.Result(claims + [check("one more", 1.0, 0.0 if fails else 1.0)], {})

    with_run(monkeypatch, "scansnap-fig4", claims_run)
    assert run(["reproduce", "scansnap-fig4", "--out", tmp_path / "r"], capsys)[0] == 0
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["claim_counts"] == {"holds": 2 - fails, "fails": int(fails), "unresolved": 0, "erratum": 1, "finding": 1}
    assert m["all_hold"] is (not fails)


def test_an_unresolved_claim_is_counted_apart_in_every_output(tmp_path, capsys, monkeypatch):
    """The printed line, metrics.json (its interval, n and method) and report.md: unresolved is neither a
    hold nor a failure (all_hold: no claim fails)."""
    def claims_run(cfg, ctx):
        return registry.Result([check("sure", 1.0, 1.0), check("open", 1.0, 1.0, 0.1, "abs", interval=(0.8, 1.05),
                                                                  n=30, method="paired bootstrap, 95%")], {})

    with_run(monkeypatch, "scansnap-fig4", claims_run)
    code, out, _ = run(["reproduce", "scansnap-fig4", "--out", tmp_path / "r"], capsys)
    assert code == 0 and out.startswith("scansnap-fig4: 1/2 claims hold, 1 unresolved; report: ")
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["claim_counts"] == {"holds": 1, "fails": 0, "unresolved": 1, "erratum": 0, "finding": 0}
    sure, open_ = m["claims"]
    assert not {"interval", "n", "method"} & set(sure)
    assert (open_["status"], open_["holds"], open_["interval"], open_["n"]) == ("unresolved", None, [0.8, 1.05], 30)
    report = (tmp_path / "r" / "report.md").read_text()
    assert "| unresolved | open | 1 [0.8, 1.05], n=30 |" in report and "interval: paired bootstrap, 95%" in report
