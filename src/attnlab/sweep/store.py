"""A sweep's folder: ``DIR/sweep.json`` (the grid and every cell's outcome), ``DIR/sweep.md``, a figure,
and ``DIR/cells/<cell>/`` -- each cell an ordinary run folder (config.json, metrics.json, figures,
report.md) plus ``cell.json`` (what ran there).

A cell folder is placed whole (written aside, then renamed), so it is complete or absent: a re-run
skips exactly the cells whose folder holds their ``cell.json``. The grid's identity (experiment, fixed
settings, quick, the axis keys) is written before any cell runs; a folder holding another sweep is
refused. Adding values to an axis is the same sweep, extended: its finished cells are kept.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

from attnlab.core.errors import UsageError
from attnlab.core.io import staged_dir, write_atomic, write_json
from attnlab.sweep.cell import CELL_FILE
from attnlab.sweep.grid import Cell, Grid

MANIFEST = "sweep.json"


def identity(grid: Grid) -> dict:
    g = grid.to_json()
    return {"experiment": g["experiment"], "fixed": g["fixed"], "quick": g["quick"], "seeds_each": g["seeds_each"],
            "axis_keys": list(g["axes"])}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def writing(out: Path) -> Iterator[None]:
    """A folder this process cannot read or write (read-only, someone else's, a full disk) is one line naming
    it, not a traceback."""
    try:
        yield
    except OSError as e:
        raise UsageError(f"cannot write the sweep's folder --out {out} ({e.strerror or e}): give --out a folder "
                         "you can write to") from None


def claim_dir(out: Path, grid: Grid) -> Path:
    """Make ``out`` this sweep's folder, or refuse (one line) if it holds anything else or cannot be written;
    a refused folder is left as it was."""
    out = Path(out).expanduser().absolute()
    created: list[Path] = []
    try:
        with writing(out):
            created = [p for p in (out, *out.parents) if not p.exists()]  # innermost first
            _claim(out, grid)
    except UsageError:
        for p in created:  # only folders made here, and only if still empty
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    return out


def _claim(out: Path, grid: Grid) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder path")
    if out.is_dir() and any(out.iterdir()):
        manifest = _read_json(out / MANIFEST)
        if manifest is None:
            raise UsageError(f"--out {out} already holds other files: choose an empty or new folder")
        theirs, ours = manifest.get("identity"), identity(grid)
        if theirs != ours:
            diff = ", ".join(k for k in ours if (theirs or {}).get(k) != ours[k]) or "everything"
            raise UsageError(f"--out {out} holds a different sweep ({(theirs or {}).get('experiment')}; differs in "
                             f"{diff}): choose another folder, or repeat that sweep's command to resume it")
    else:
        out.mkdir(parents=True, exist_ok=True)
        manifest = {"identity": identity(grid), "grid": grid.to_json(), "cells": []}
    # written (again, unchanged, when resuming) before any cell runs: an unwritable folder is said now
    write_json(out / MANIFEST, manifest)


def cell_dir(out: Path, cell: Cell) -> Path:
    return out / "cells" / cell.folder


def is_complete(out: Path, cell: Cell) -> bool:
    """A cell is done iff its folder was placed with its own cell.json (same axes and fixed settings)."""
    record = _read_json(cell_dir(out, cell) / CELL_FILE)
    return record is not None and record.get("overrides") == cell.overrides


def place(out: Path, cell: Cell, files: dict[str, bytes], seconds: float) -> Path:
    """Write a finished cell's files into its folder, all at once."""
    target = cell_dir(out, cell)
    with writing(out), staged_dir(target) as stage:
        for rel, data in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        write_json(stage / CELL_FILE, {"name": cell.name, "axes": dict(cell.axes), "overrides": cell.overrides,
                                       "seconds": round(seconds, 3)})
    return target


def record_failure(out: Path, cell: Cell, outcome: dict) -> None:
    """A failed cell leaves its error beside the cells (not a cell folder: a re-run tries it again)."""
    with writing(out):
        (out / "failed").mkdir(exist_ok=True)
        write_atomic(out / "failed" / f"{cell.folder}.txt", f"{outcome['error']}\n\n{outcome.get('traceback', '')}")


def failure(out: Path, cell: Cell) -> str | None:
    """The one-line error of this cell's last failed run, if it has not succeeded since."""
    try:
        return (out / "failed" / f"{cell.folder}.txt").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def clear_failure(out: Path, cell: Cell) -> None:
    (out / "failed" / f"{cell.folder}.txt").unlink(missing_ok=True)


def cell_metrics(out: Path, cell: Cell) -> dict | None:
    return _read_json(cell_dir(out, cell) / "metrics.json")
