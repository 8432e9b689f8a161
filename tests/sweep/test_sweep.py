"""`attnlab sweep` on a local Ray instance, over a tiny experiment: streaming-ppl on a tiny model folder."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from tiny_models import save_hf

TEXT = "the cat sat on the mat and the dog ran to the cat. " * 20
TINY = ["tokens=64", "long_tokens=0"]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (its start-up is paid once); `attnlab sweep` uses it and leaves it running."""
    import ray  # here, not at the top: the quick subset (-m "not slow") never starts Ray, nor pays its import

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text(TEXT)
    return [f"model={save_hf(tmp_path / 'm')}", f"text={tmp_path / 'text.txt'}"] + TINY


def sweep(out, sets, *grid, extra=()):
    argv = ["sweep", "streaming-ppl", "--out", str(out)] + [a for g in grid for a in ("--grid", g)]
    return main(argv + [a for s in sets for a in ("--set", s)] + list(extra))


def outcome(folder):
    """What a run found (its resolved config and claims), without its timings."""
    m = json.loads((folder / "metrics.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    return config, [(c["claim"], c["measured"], c["status"]) for c in m["claims"]], m["ppl"]


@pytest.mark.slow
def test_cells_equal_reproduce_runs_and_a_rerun_skips_them(local_ray, tiny, tmp_path, capsys):
    """Equal to the last bit, at the cell's thread count (float sums are ordered by the threads)."""
    out = tmp_path / "sweep"
    assert sweep(out, tiny, "budget=8,16", "n_sink=2,4") == 0
    table = json.loads((out / "sweep.json").read_text())["cells"]
    assert [r["cell"] for r in table] == ["budget=8,n_sink=2", "budget=8,n_sink=4", "budget=16,n_sink=2",
                                          "budget=16,n_sink=4"]
    assert all(r["status"] == "done" for r in table)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each cell ran: --cpus-per-cell 1
    for r in table:
        ref = tmp_path / "reproduce" / r["folder"]
        sets = tiny + [f"{k}={v}" for k, v in r["axes"].items()]
        assert main(["reproduce", "streaming-ppl", "--out", str(ref)] + [a for s in sets for a in ("--set", s)]) == 0
        assert outcome(out / r["folder"]) == outcome(ref)
    torch.set_num_threads(threads)
    assert (out / "sweep.md").read_text().count("| done |") == 4 and (out / "sweep.png").exists()
    stamp = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/metrics.json")}
    capsys.readouterr()
    assert sweep(out, tiny, "budget=8,16", "n_sink=2,4") == 0  # the same command again: nothing runs
    assert "4/4 cells done (4 were already)" in capsys.readouterr().out
    assert stamp == {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/metrics.json")}


@pytest.mark.slow
def test_a_failing_cell_is_reported_and_the_others_go_on(local_ray, tiny, tmp_path, capsys):
    out, good = tmp_path / "sweep", tiny[1].removeprefix("text=")
    sets = [s for s in tiny if not s.startswith("text=")]
    assert sweep(out, sets, f"text={good},{tmp_path / 'missing.txt'}", "budget=8,16") == 1
    rows = {r["cell"]: r for r in json.loads((out / "sweep.json").read_text())["cells"]}
    failed = [r for r in rows.values() if r["status"] == "failed"]
    assert len(failed) == 2 and all("missing.txt: no such file" in r["error"] for r in failed)
    assert sum(r["status"] == "done" for r in rows.values()) == 2
    assert "failed: text=" in capsys.readouterr().err  # said as it happened
    assert "no such file" in (out / "sweep.md").read_text()
    (tmp_path / "missing.txt").write_text(TEXT)  # fixed: a re-run runs only the two failed cells
    capsys.readouterr()
    assert sweep(out, sets, f"text={good},{tmp_path / 'missing.txt'}", "budget=8,16") == 0
    assert "4/4 cells done (2 were already)" in capsys.readouterr().out


@pytest.mark.slow
def test_the_table_after_each_cell_equals_a_fresh_reading(local_ray, tiny, tmp_path, monkeypatch):
    """After each cell the sweep re-reads that cell only; the table it writes is what re-reading all gives."""
    from attnlab.sweep import report
    seen, real = [], report.write

    def spy(out, grid, chosen, figure=True, table=None):
        if table is not None:  # the interim writes, one per finished cell
            seen.append((list(table), report.rows(out, grid, chosen)))
        return real(out, grid, chosen, figure, table)

    monkeypatch.setattr(report, "write", spy)
    assert sweep(tmp_path / "sweep", tiny, "budget=8,16", "n_sink=2") == 0
    assert [sum(r["status"] == "done" for r in kept) for kept, _ in seen] == [1, 2]
    assert all(kept == fresh for kept, fresh in seen)


def _stop_after(argv, folder, cells: int, signum) -> tuple[int, str]:
    """Start the sweep in its own process, send it ``signum`` once ``cells`` cells are done, return (rc, stderr)."""
    # SIGINT at its default: a process started by a script in the background (as CI may be) inherits it ignored
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while len(list(folder.glob("cells/*/cell.json"))) < cells and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode() + err.decode()[-300:]


@pytest.mark.slow
def test_a_killed_sweep_resumes_to_the_uninterrupted_result(local_ray, tiny, tmp_path):
    """Stopped by kill (SIGTERM), resumed, stopped again by Ctrl-C (SIGINT), resumed to the end."""
    grid = ["budget=8,12,16", "n_sink=2,4", "dense_chunk=16,32"]  # 12 cells, one at a time
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert sweep(whole, tiny, *grid) == 0
    argv = [sys.executable, "-m", "attnlab", "sweep", "streaming-ppl", "--out", str(killed), "--workers", "1"]
    argv += [a for g in grid for a in ("--grid", g)] + [a for s in tiny for a in ("--set", s)]
    before = 0
    for signum in (signal.SIGTERM, signal.SIGINT):
        rc, said = _stop_after(argv, killed, before + 1, signum)
        done = len(list(killed.glob("cells/*/cell.json")))
        assert rc == 128 + signum and before < done < 12, (signum, rc, done, said)
        assert "interrupted; the finished cells are kept" in said
        assert not list(killed.glob("cells/.*"))  # no half-written cell left behind
        assert f"{done}/12 cells done" in (killed / "sweep.md").read_text()
        before = done
    assert sweep(killed, tiny, *grid) == 0
    cells = sorted(p.name for p in (whole / "cells").iterdir())
    assert cells == sorted(p.name for p in (killed / "cells").iterdir()) and len(cells) == 12
    assert all(outcome(whole / "cells" / c) == outcome(killed / "cells" / c) for c in cells)


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_leaves_no_ray_process(tiny, tmp_path):
    """The local Ray a sweep started stops with it even under kill -9 (its agents would outlive it otherwise)."""
    from attnlab.sweep import reaper

    out = tmp_path / "sweep"
    argv = [sys.executable, "-m", "attnlab", "sweep", "streaming-ppl", "--out", str(out), "--workers", "1",
            "--grid", "budget=8,12,16,20"] + [a for s in tiny for a in ("--set", s)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.time() + 120
    while not list(out.glob("cells/*/cell.json")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)  # a cell done: Ray is up, a worker runs the next
    procs = reaper.table()
    started = reaper.descendants({(proc.pid, procs[proc.pid][1])}, procs) - {(proc.pid, procs[proc.pid][1])}
    proc.kill()
    proc.wait()
    assert len(started) >= 4, started  # the watchdog, gcs_server, raylet, a worker at least
    def alive():
        return {(p, s) for p, s in started if reaper.table().get(p, (0, None))[1] == s}

    deadline = time.time() + 30
    while alive() and time.time() < deadline:
        time.sleep(0.2)
    assert not alive()


def test_the_watchdog_follows_what_the_driver_starts_and_nothing_else():
    """One look at a made-up process table: pid -> (parent, start time). The driver 100 had 101 (the user's)
    before; it starts 102 (gcs), 103 (raylet), which starts 104 (an agent); 1 is init, 300 the watchdog."""
    from attnlab.sweep.reaper import follow

    before = {(101, "a")}
    procs = {1: (0, "0"), 100: (1, "d"), 101: (100, "a"), 102: (100, "b"), 103: (100, "c"), 104: (103, "e"),
             300: (100, "w"), 999: (1, "x")}
    seen = follow(set(), 100, before, procs, me=300)
    assert seen == {(102, "b"), (103, "c"), (104, "e")}
    # the driver SIGKILLed: the kernel killed 102 and 103 with it, 104 went to init; a new process reused pid 102
    later = {1: (0, "0"), 101: (1, "a"), 102: (1, "y"), 104: (1, "e"), 105: (104, "f"), 300: (1, "w")}
    assert follow(seen, 100, before, later, me=300) == seen | {(105, "f")}


def test_stop_ends_a_process_that_ignores_sigterm_and_spares_a_reused_pid():
    from attnlab.sweep import reaper

    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    stubborn.stdout.readline()  # SIGTERM is ignored from here on
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = reaper.table()[stubborn.pid][1]
        hit = reaper.stop({(stubborn.pid, start), (bystander.pid, "not its start time")}, grace=0.5)
        assert hit == {(stubborn.pid, start)}
        assert stubborn.wait(timeout=10) == -signal.SIGKILL and bystander.poll() is None
    finally:
        bystander.kill()
        stubborn.kill()
        bystander.wait()


@pytest.mark.parametrize("argv, message", [
    (["sweep", "streaming-pl", "--grid", "budget=8"], "did you mean 'streaming-ppl'"),
    (["sweep", "streaming-ppl", "--grid", "budgte=8,16"], "did you mean 'budget'"),
    (["sweep", "streaming-ppl", "--grid", "budget="], "the axis budget is empty"),
    (["sweep", "streaming-ppl", "--grid", "budget=8,40"], "cell budget=40: tokens=64, budget=40"),
    (["sweep", "streaming-ppl", "--grid", "n_sink=1,4", "--set", "budget=16"], "cell n_sink=1: n_sink=1: "
     "streaming-ppl compares"),
    (["sweep", "streaming-ppl", "--grid", "budget=8", "--address", "127.0.0.1:1"], "cannot reach the Ray cluster "
     "at --address 127.0.0.1:1"),
    (["sweep", "streaming-ppl", "--grid", "budget=8", "--address", "auto", "--workers", "2"], "drop one of them"),
])
def test_bad_sweeps_are_one_line_exit_2_and_write_nothing(tiny, tmp_path, capsys, argv, message):
    out = tmp_path / "sweep"
    assert main(argv + ["--out", str(out)] + [a for s in tiny for a in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_folder_holding_another_sweep_is_refused_and_kept(tiny, tmp_path, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"identity": {"experiment": "h2o-ppl"}, "cells": []}))
    assert sweep(out, tiny, "budget=8,16") == 2
    assert "holds a different sweep (h2o-ppl" in capsys.readouterr().err
    assert json.loads((out / "sweep.json").read_text())["identity"] == {"experiment": "h2o-ppl"}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    assert sweep(tmp_path / "notes", tiny, "budget=8,16") == 2
    assert "already holds other files" in capsys.readouterr().err
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"


@pytest.fixture
def read_only(monkeypatch):
    """Makes a folder one no one may write in: chmod 555, and where the mode binds no one (root, as CI runs)
    its writes refused as the kernel would refuse them."""
    made = []
    real_mkdir, real_open = os.mkdir, Path.open

    def inside(path) -> bool:
        path = Path(path).absolute()
        return any(f == path or f in path.parents for f in made)

    def refused(path):
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def mkdir(path, *a, **k):
        if inside(path):
            raise refused(path)
        return real_mkdir(path, *a, **k)

    def open_(self, mode="r", *a, **k):
        if inside(self) and set(mode) & set("wax+"):
            raise refused(self)
        return real_open(self, mode, *a, **k)

    def make(folder: Path) -> Path:
        folder.chmod(0o555)
        if os.access(folder, os.W_OK):
            made.append(folder.absolute())
            monkeypatch.setattr(os, "mkdir", mkdir)
            monkeypatch.setattr(Path, "open", open_)
        return folder

    yield make
    for folder in made:
        folder.chmod(0o755)


@pytest.mark.parametrize("where", [".", "new/sweep"])
def test_a_folder_that_cannot_be_written_is_one_line_exit_2(tiny, tmp_path, read_only, capsys, where):
    """Said before Ray starts, naming the folder; nothing is made."""
    (tmp_path / "ro").mkdir()
    out = read_only(tmp_path / "ro") / where
    assert sweep(out, tiny, "budget=8,16") == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot write the sweep's folder --out {out.absolute()} (Permission denied)" in err
    assert len(err.splitlines()) == 1 and list((tmp_path / "ro").iterdir()) == []


def test_resuming_in_a_folder_become_read_only_is_one_line_exit_2(tiny, tmp_path, read_only, monkeypatch, capsys):
    """Said before Ray starts (not after the first cell); the folder is left as it was."""
    from attnlab.core.errors import UsageError
    from attnlab.sweep import engine

    def no_ray(*args):
        raise UsageError("no Ray in this test")

    monkeypatch.setattr(engine, "connect", no_ray)
    out = tmp_path / "sweep"
    assert sweep(out, tiny, "budget=8,16") == 2  # the folder claimed, then stopped before any cell
    assert "no Ray in this test" in capsys.readouterr().err
    manifest = (out / "sweep.json").read_text()
    assert sweep(read_only(out), tiny, "budget=8,16") == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot write the sweep's folder --out {out} (Permission denied)" in err and len(err.splitlines()) == 1
    assert (out / "sweep.json").read_text() == manifest and os.listdir(out) == ["sweep.json"]


@pytest.mark.slow
def test_no_other_command_imports_ray():
    code = ("import sys; from attnlab.cli import build_parser; build_parser(); "
            "from attnlab.experiments import registry; registry.load_all(); print('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
