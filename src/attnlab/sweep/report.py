"""What a sweep found, read back from its cell folders: ``sweep.json``, ``sweep.md`` and ``sweep.png``.

Every row is a cell: its axis values, its status (done, failed with its one-line error, or not run --
an interrupted sweep), the status and measured value of each of its claims, and the ``--metric`` values
asked for (dotted paths into the cell's metrics.json, e.g. ``ppl.dense``). The figure puts the first
axis on x and draws one panel per claim and chosen metric, one line per combination of the other axes,
seeds averaged (their spread shaded).
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np

from attnlab.core.io import write_atomic, write_json
from attnlab.sweep import store
from attnlab.sweep.grid import Grid

MAX_PANELS = 8


def lookup(metrics: dict, path: str):
    """The value at a dotted path of a metrics dict (None where there is none)."""
    value = metrics
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value if isinstance(value, (int, float, str, bool)) or value is None else None


NUMBER = r"(\d+(?:\.\d+)?)"


def claim_key(wording: str) -> str:
    """A claim's identity across cells: its wording with the numbers blanked, since cells of one experiment
    may hold different claims (Fig. 6's 1/2 tokens vs 3/6 ...) or word one claim with their own settings."""
    return re.sub(NUMBER, "#", wording)


def shared_wording(wordings: list[str]) -> str:
    """One claim's wording over its cells: a number every cell words alike kept, one they differ in as ``#``
    (the wordings share a key, so they split into the same parts)."""
    parts = [re.split(NUMBER, w) for w in wordings]
    return "".join(p[0] if len(set(p)) == 1 else "#" for p in zip(*parts))


def claim_columns(table: list[dict]) -> list[tuple[str, str]]:
    """(key, wording shared by the done cells holding it) of every claim of the done cells, first seen first."""
    columns: dict[str, list[str]] = {}
    for r in table:
        for c in r.get("claims", []) if r["status"] == "done" else []:
            columns.setdefault(claim_key(c["claim"]), []).append(c["claim"])
    return [(key, shared_wording(wordings)) for key, wordings in columns.items()]


def _claim(row: dict, key: str) -> dict | None:
    return next((c for c in row["claims"] if claim_key(c["claim"]) == key), None)


def row(out: Path, cell, chosen: list[str]) -> dict:
    """One cell's line of the table, read from its folder: done (its claims and chosen metrics), failed or not run."""
    line = {"cell": cell.name, "folder": f"cells/{cell.folder}", "axes": dict(cell.axes)}
    metrics = store.cell_metrics(out, cell) if store.is_complete(out, cell) else None
    if metrics is None:
        error = store.failure(out, cell)
        line["status"] = "not run" if error is None else "failed"
        if error is not None:
            line["error"] = error
    else:
        line.update(status="done", seconds=metrics.get("seconds"), claim_counts=metrics.get("claim_counts"),
                    claims=[{"claim": c["claim"], "measured": c.get("measured"), "status": c["status"]}
                            for c in metrics.get("claims", [])],
                    metrics={k: lookup(metrics, k) for k in chosen})
    return line


def rows(out: Path, grid: Grid, chosen: list[str]) -> list[dict]:
    return [row(out, cell, chosen) for cell in grid.cells()]


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else "" if v is None else str(v)


def markdown(grid: Grid, table: list[dict], chosen: list[str]) -> str:
    keys = [k for k, _ in grid.axes]
    done = [r for r in table if r["status"] == "done"]
    columns = claim_columns(table)
    head = keys + ["status", "claims hold"] + [f"claim {i + 1}" for i in range(len(columns))] + chosen
    lines = [f"# sweep: {grid.experiment}", "",
             f"{len(done)}/{len(table)} cells done, {sum(r['status'] == 'failed' for r in table)} failed, "
             f"{sum(r['status'] == 'not run' for r in table)} not run. Fixed settings: "
             + (", ".join(f"{k}={v}" for k, v in grid.every_cell) or "none")
             + (" (quick)" if grid.quick else "") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        cells = [r["axes"][k] for k in keys] + [r["status"]]
        if r["status"] == "done":
            c = r["claim_counts"] or {}
            checked = c.get("holds", 0) + c.get("fails", 0) + c.get("unresolved", 0)  # as describe() counts them
            held = f"{c.get('holds', 0)}/{checked}"
            claims = [_claim(r, key) for key, _ in columns]
            cells += [held] + ["" if x is None else f"{_fmt(x['measured'])} ({x['status']})" for x in claims]
            cells += [_fmt(r["metrics"][k]) for k in chosen]
        else:
            cells += [r.get("error", "").replace("|", "/")] + [""] * (len(columns) + len(chosen))
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    if columns:
        lines += ["", "Claims (# where the cells holding one word a number differently; blank where a cell has "
                  "no such claim):", ""]
        lines += [f"{i + 1}. {wording}" for i, (_, wording) in enumerate(columns)]
    return "\n".join(lines) + "\n"


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def draw(path: Path, grid: Grid, table: list[dict], chosen: list[str]) -> bool:
    """One panel per claim / chosen metric against the first axis; False when there is nothing to draw."""
    from attnlab.core.plotting import plt

    done = [r for r in table if r["status"] == "done"]
    series = [(f"claim {i + 1}", lambda r, key=key: (_claim(r, key) or {}).get("measured"))
              for i, (key, _) in enumerate(claim_columns(table))] + [(k, lambda r, k=k: r["metrics"].get(k))
                                                                      for k in chosen]
    series = series[:MAX_PANELS]
    if not done or not series:
        return False
    x_key, x_values = grid.axes[0]
    others = [(k, v) for k, v in grid.axes[1:] if k != "seed"]
    numeric = all(_number(v) is not None for v in x_values)
    xs = [float(v) for v in x_values] if numeric else list(range(len(x_values)))
    fig, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.4), layout="constrained", squeeze=False)
    for ax, (label, get) in zip(axes[0], series):
        for combo in itertools.product(*(v for _, v in others)):
            picked = dict(zip((k for k, _ in others), combo))
            ys = [[_number(get(r)) for r in done if r["axes"][x_key] == xv
                   and all(r["axes"][k] == v for k, v in picked.items())] for xv in x_values]
            ys = [[y for y in col if y is not None] for col in ys]
            keep = [i for i, col in enumerate(ys) if col]
            if not keep:
                continue
            mean = [float(np.mean(ys[i])) for i in keep]
            line = ax.plot([xs[i] for i in keep], mean, "o-", label=", ".join(f"{k}={v}" for k, v in picked.items()))
            lo, hi = [min(ys[i]) for i in keep], [max(ys[i]) for i in keep]
            if any(a != b for a, b in zip(lo, hi)):
                ax.fill_between([xs[i] for i in keep], lo, hi, alpha=0.2, color=line[0].get_color())
        ax.set(xlabel=x_key, title=label)
        if not numeric:
            ax.set_xticks(xs, x_values, rotation=30, fontsize=7)
        if others:
            ax.legend(fontsize=7)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    tmp.replace(path)  # written aside, then renamed
    return True


def write(out: Path, grid: Grid, chosen: list[str], figure: bool = True, table: list[dict] | None = None) -> list[dict]:
    """Write sweep.json, sweep.md and (``figure``, when drawable) sweep.png from ``table`` (the rows in the
    grid's order; by default every cell re-read); the rows."""
    table = rows(out, grid, chosen) if table is None else table
    with store.writing(out):
        write_json(out / store.MANIFEST, {"identity": store.identity(grid), "grid": grid.to_json(), "cells": table})
        write_atomic(out / "sweep.md", markdown(grid, table, chosen))
        if figure:
            draw(out / "sweep.png", grid, table, chosen)
    return table
