"""One cell of a sweep, run where a worker stands: an ordinary ``attnlab reproduce`` run into a private
folder, whose files come back to the driver as bytes.

Why bytes: a worker on another machine of a cluster need not share the driver's file system, and the
driver alone places a cell's folder (written aside, then renamed), so a sweep killed at any moment
leaves each cell either complete or absent. Errors come back as one line, never raised: one failing
cell must not stop the others.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

CELL_FILE = "cell.json"  # written into every finished cell folder: what ran there
CELL_TMP = "attnlab-cell-"  # + the worker's pid: a private folder a cell runs in


@dataclass(frozen=True)
class CellJob:
    """Everything a worker needs: picklable, no handles to the driver's objects."""

    experiment: str
    overrides: dict[str, str]
    quick: bool
    device: str
    threads: int
    command: str
    cwd: str = ""  # the driver's folder: relative data paths resolve as they would there
    env: tuple[tuple[str, str], ...] = ()  # e.g. ATTNLAB_DATA, carried to workers


def run_cell(job: CellJob) -> dict:
    """{"status": "ok", "files": {relative path: bytes}, "seconds", "counts"} or {"status": "failed",
    "error": one line, "traceback"}."""
    import torch

    from attnlab.core.errors import UsageError
    from attnlab.experiments import registry, runner
    from attnlab.experiments.claims import tally

    os.environ.update(dict(job.env))
    if job.cwd and os.path.isdir(job.cwd):
        os.chdir(job.cwd)
    torch.set_num_threads(max(1, job.threads))
    t0 = time.perf_counter()
    try:
        exp = registry.get(job.experiment)
        cfg = runner.resolve_config(exp, job.overrides, None, job.quick)
        remove_orphans(Path(tempfile.gettempdir()))
        with tempfile.TemporaryDirectory(prefix=f"{CELL_TMP}{os.getpid()}-") as tmp:
            out = Path(tmp) / "run"
            result = runner.run_into(exp, cfg, out, job.device, job.command)
            files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    except UsageError as e:  # MissingResource and ConfigError too: their message is the fix
        return {"status": "failed", "error": str(e), "traceback": "", "seconds": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 -- a cell's crash is reported, and the sweep goes on
        line = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return {"status": "failed", "error": line, "traceback": traceback.format_exc(),
                "seconds": time.perf_counter() - t0}
    return {"status": "ok", "files": files, "seconds": time.perf_counter() - t0, "counts": tally(result.claims)}


def remove_orphans(root: Path) -> list[Path]:
    """Remove the private folders of cells whose worker is gone. Ray ends a stopped sweep's workers with
    SIGKILL, so their TemporaryDirectory is never cleaned; the next cell run on this machine cleans it."""
    gone = [d for d in root.glob(CELL_TMP + "*") if not _alive(d.name[len(CELL_TMP):].split("-")[0])]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _alive(pid: str) -> bool:
    """Whether a process ``pid`` exists; a name that is no pid (an older layout) counts as alive: kept."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
