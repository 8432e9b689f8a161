"""The command line and the experiment contract: files, claims, bad input, atomic output."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from attnlab import cli
from attnlab.experiments import registry


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_runs_as_module():
    p = subprocess.run([sys.executable, "-m", "attnlab", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "reproduce" in p.stdout and "demo" in p.stdout


def test_list(capsys):
    code, out, _ = run(["reproduce", "--list"], capsys)
    assert code == 0
    for name in ("scansnap-fig4", "scansnap-fig6", "scansnap-theorems"):
        assert name in out


def test_fig4_writes_the_contract(tmp_path, capsys):
    out_dir = tmp_path / "fig4"
    code, out, _ = run(["reproduce", "scansnap-fig4", "--out", str(out_dir), "--set", "sgd.steps=12"], capsys)
    assert code == 0 and "claims hold" in out
    assert {"config.json", "metrics.json", "report.md", "fig4.png"} <= {p.name for p in out_dir.iterdir()}
    config = json.loads((out_dir / "config.json").read_text())
    assert config["sgd"]["steps"] == 12 and config["experiment"] == "scansnap-fig4"
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["experiment"] == "scansnap-fig4" and metrics["claims"]
    for c in metrics["claims"]:
        assert {"claim", "measured", "expected", "tolerance", "holds"} <= set(c)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_fig6_rows(tmp_path, capsys):
    out_dir = tmp_path / "fig6"
    code, _, _ = run(["reproduce", "scansnap-fig6", "--out", str(out_dir), "--seeds", "2", "--set", "num_last=1,3",
                      "--set", "eta_z=1,2", "--set", "ratio=1,10", "--set", "sgd.steps=5"], capsys)
    assert code == 0
    rows = json.loads((out_dir / "metrics.json").read_text())["rows"]
    assert len(rows) == 8
    for r in rows:
        assert set(r) == {"num_last", "eta_z", "ratio", "entropy_mean", "entropy_std", "n_seeds"} and r["n_seeds"] == 2
    assert (out_dir / "fig6.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["reproduce", "scansnap-fig5", "--out", "X"], "did you mean 'scansnap-fig"),
        (["reproduce", "scansnap-fig6", "--out", "X", "--set", "eta_z=-1"], "must be positive"),
        (["reproduce", "scansnap-fig6", "--out", "X", "--set", "ratio=0"], "positive"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--set", "data.num_last=0"], "zero classes"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--set", "data.T=1"], "T >= 2"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--set", "sgd.stpes=3"], "did you mean 'sgd.steps'"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--set", "sgd.steps=many"], "type int"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--seeds", "3"], "--seeds"),
        (["reproduce", "scansnap-fig4"], "--out DIR is required"),
        (["reproduce", "scansnap-fig4", "--out", "X", "--device", "tpu"], "cpu or cuda"),
        (["reproduce", "--bogus"], "unrecognized"),
    ],
)
def test_bad_input_one_line_exit_2(argv, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:") and fragment in lines[0], err
    assert not (tmp_path / "X").exists()


def test_cuda_requested_without_cuda(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", str(tmp_path / "r"), "--device", "cuda"], capsys)
    assert code == 2 and "--device cpu" in err


def test_unwritable_out(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", str(blocker / "run")], capsys)
    assert code == 2 and "writable" in err
    if os.geteuid() != 0:  # root ignores permission bits
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        code, _, err = run(["reproduce", "scansnap-fig4", "--out", str(ro / "run")], capsys)
        assert code == 2


def test_failed_run_keeps_previous_results(tmp_path, capsys):
    out_dir = tmp_path / "run"
    assert run(["reproduce", "scansnap-fig4", "--out", str(out_dir), "--set", "sgd.steps=3"], capsys)[0] == 0
    before = (out_dir / "metrics.json").read_bytes()
    code, _, _ = run(["reproduce", "scansnap-fig4", "--out", str(out_dir), "--set", "eta_z=-2"], capsys)
    assert code == 2 and (out_dir / "metrics.json").read_bytes() == before


def test_interrupted_run_leaves_nothing_and_keeps_previous(tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "run"
    assert run(["reproduce", "scansnap-fig4", "--out", str(out_dir), "--set", "sgd.steps=3"], capsys)[0] == 0
    before = (out_dir / "metrics.json").read_bytes()
    exp = registry.get("scansnap-fig4")

    def boom(cfg, ctx):
        (ctx.out / "half.png").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setitem(registry._REGISTRY, exp.name, dataclasses.replace(exp, run=boom))
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", str(out_dir)], capsys)
    assert code == 130 and "interrupted" in err
    assert (out_dir / "metrics.json").read_bytes() == before and not (out_dir / "half.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_refuses_folder_with_other_files(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("precious")
    code, _, err = run(["reproduce", "scansnap-fig4", "--out", str(tmp_path)], capsys)
    assert code == 2 and "other files" in err
    assert (tmp_path / "mine.txt").read_text() == "precious"


def test_demo_writes_index_with_every_claim_and_figure(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "DEMO_EXPERIMENTS", ("scansnap-fig4",))
    exp = registry.get("scansnap-fig4")
    monkeypatch.setitem(registry._REGISTRY, exp.name, dataclasses.replace(exp, quick={"sgd.steps": 15}))
    out_dir = tmp_path / "demo"
    code, out, _ = run(["demo", "--out", str(out_dir)], capsys)
    assert code == 0 and str(out_dir / "index.html") in out
    html = (out_dir / "index.html").read_text()
    claims = json.loads((out_dir / "scansnap-fig4" / "metrics.json").read_text())["claims"]
    assert html.count("✓") + html.count("✗") == len(claims)
    assert "scansnap-fig4/fig4.png" in html and (out_dir / "report.md").exists()
    assert json.loads((out_dir / "scansnap-fig4" / "config.json").read_text())["sgd"]["steps"] == 15
