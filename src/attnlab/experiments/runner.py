"""Run an experiment into a folder: the experiment contract, for registered experiments and
ad-hoc commands (``attnlab stream``, ``passkey``, ``longppl``: experiments with no claims) alike.

``DIR/config.json`` (fully resolved config), ``DIR/metrics.json`` (claims, their counts by status,
and extra metrics; strict JSON), PNG figures and ``DIR/report.md``. Output is written into a hidden
staging folder beside DIR and moved into place only when everything is written, so a failed or
interrupted run never leaves a folder that looks complete, and a previous run in DIR stays intact
until the new one has succeeded. Staging folders of killed runs are removed by the next run.
A run replaces only a run of the same experiment (a user's files, another experiment's predictors
or checkpoints are never lost), and a full disk is one line naming --out, the old run untouched.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from attnlab import __version__
from attnlab.core.errors import UsageError
from attnlab.core.io import DISK_REFUSALS, NotPlaced, disk_refusal, staged_dir, write_atomic, write_json
from attnlab.core.machine import machine
from attnlab.experiments import config as config_mod
from attnlab.experiments.claims import tally
from attnlab.experiments.registry import Experiment, Result
from attnlab.experiments.report import experiment_report

CONTRACT = ("config.json", "metrics.json", "report.md", "index.html")  # a run's own files (and its PNGs)
DEMO_TITLE = "<title>attnlab demo</title>"  # in the head of a demo's index.html


@dataclass
class RunContext:
    """What a running experiment may use: its output folder, device, progress bars, and the
    command line that started it (ad-hoc commands record it in their metrics)."""

    out: Path
    device: str = "cpu"
    show_progress: bool = True
    command: str = ""
    # what the run holds open until it ends (the methods entered on its model): the runner exits it
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)

    def hold(self, manager):
        """Enter ``manager`` until the run ends (the runner exits it, also when the run raises); its value."""
        return self.held.enter_context(manager)

    def progress(self, total: int, desc: str):
        """A tqdm bar with ETA on stderr (hidden when stderr is not a terminal)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=None if self.show_progress else True, leave=False, file=sys.stderr)

    def savefig(self, fig, name: str) -> str:
        import matplotlib.pyplot as plt

        fig.savefig(self.out / name, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return name


def command_line(argv: list[str]) -> str:
    """The command that made a run, as a user could type it again (recorded in report.md)."""
    return "attnlab " + " ".join(shlex.quote(str(a)) for a in argv)


def check_device(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device}: use cpu or cuda")
    import torch  # here, not at the top: `attnlab --help` need not load PyTorch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible to PyTorch; use --device cpu")
    return device


def resolve_config(exp: Experiment, overrides: dict[str, str], seeds: int | None, quick: bool) -> Any:
    base = dict(exp.quick) if quick else {}
    if seeds is not None:
        keys = config_mod.flatten(exp.config_cls())
        if "seeds" not in keys:
            hint = "use --set seed=N to pick its one seed" if "seed" in keys else "it is deterministic"
            raise UsageError(f"{exp.name} has no number of seeds: drop --seeds ({hint})")
        if seeds < 1:
            raise UsageError(f"--seeds {seeds}: use at least 1")
        base["seeds"] = seeds
    return config_mod.resolve(exp.config_cls, overrides, base)


def run_kind(folder: Path) -> str | None:
    """Which experiment or command wrote the run in ``folder``: config.json's (else metrics.json's)
    "experiment", "train" for an `attnlab train` run (its config.json's "command"; metrics.jsonl beside a
    checkpoint.pt before that was written), "demo" for a demo's index.html; None for anything else."""
    for name in ("config.json", "metrics.json"):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON: not a run's
            continue
        if isinstance(data, dict) and isinstance(data.get("experiment"), str):
            return data["experiment"]
        if isinstance(data, dict) and data.get("command") == "train":
            return "train"
    if (folder / "metrics.jsonl").is_file() and (folder / "checkpoint.pt").is_file():
        return "train"
    try:
        with open(folder / "index.html", encoding="utf-8", errors="replace") as f:
            return "demo" if DEMO_TITLE in f.read(2000) else None
    except OSError:
        return None


def check_out(out: Path, kind: str) -> None:
    """``out`` may receive a run of ``kind`` (an experiment's name, "train", "demo"): it is new, empty, or
    holds a run of the same kind, which the new run replaces (once it has completed). A user's files and
    another experiment's run (its trained predictors, a checkpoint) are never replaced: one UsageError."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder path")
    if not out.is_dir() or not any(out.iterdir()):
        return
    held = run_kind(out)
    if held is None:
        raise UsageError(f"--out {out} already holds other files: choose an empty or new folder")
    if held != kind:
        extra = sorted(p.name + "/" * p.is_dir() for p in out.iterdir()
                       if p.name not in CONTRACT and p.suffix != ".png" and not p.name.startswith("."))
        lost = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        raise UsageError(f"--out {out} holds a `{held}` run" + (f" (its {lost} would be lost)" if lost else "")
                         + f", which only another `{held}` run may replace: choose another folder")


def refused_write(e: BaseException, out: Path, fix: str = "") -> str | None:
    """One line when ``e`` is the disk refusing a write (full, over quota, read-only; see
    :func:`attnlab.core.io.disk_refusal`) while a run was written into ``out``: the cause and ``fix``
    (default: write elsewhere); None for any other error. A file outside ``out``'s folder (a cache) is
    named instead."""
    if (err := disk_refusal(e)) is None:
        return None
    cause = DISK_REFUSALS[err.errno]
    where = Path(os.fsdecode(err.filename)) if isinstance(err.filename, (str, bytes, os.PathLike)) else None
    if where is not None and not where.absolute().is_relative_to(out.parent):
        return f"cannot write {where}: {cause}" + ("" if err.errno == errno.EROFS else ": free space there")
    fix = fix or ("choose another --out" if err.errno == errno.EROFS else "free space or choose another --out")
    return f"--out {out}: {cause}: {fix}"


@contextlib.contextmanager
def staged_output(out: Path, kind: str) -> Iterator[Path]:
    """:func:`attnlab.core.io.staged_dir` for ``--out`` and a run of ``kind`` (:func:`check_out` first):
    failures to write (a full disk) or to move the finished run into place are one-line usage errors
    naming --out; the staging folder is removed and a previous run in ``out`` stays as it was."""
    out = Path(out).expanduser().absolute()
    check_out(out, kind)
    if os.path.ismount(out):  # a mount point cannot be renamed, so a finished run could not replace it
        raise UsageError(f"--out {out} is a mount point: give a folder inside it, e.g. --out {out / 'run'}")
    kept = " (the previous run there is untouched)" if out.is_dir() and any(out.iterdir()) else ""
    phase = "setup"  # where an OSError came from: making the staging folder, the run, or the last rename
    try:
        with staged_dir(out) as stage:
            phase = "run"
            yield stage
            phase = "place"
    except NotPlaced as e:
        if phase != "place":  # a folder the run itself could not place: its own error
            raise
        raise UsageError(f"the run finished but could not be moved into --out {out} ({e.reason}); "
                         f"the results are in {e.kept}") from None
    except Exception as e:
        if line := refused_write(e, out):
            raise UsageError(line + kept) from None
        if phase != "setup" or not isinstance(e, OSError):
            raise
        raise UsageError(f"cannot write to --out {out} ({e.strerror}): choose a writable folder") from None


def run_into(exp: Experiment, cfg: Any, out: Path, device: str, command: str) -> Result:
    """Run ``exp`` into the folder ``out`` through a staging folder (see :func:`staged_output`)."""
    with staged_output(out, exp.name) as stage:
        return execute(exp, cfg, stage, device, True, command)


def execute(exp: Experiment, cfg: Any, run_dir: Path, device: str, show_progress: bool, command: str) -> Result:
    """Run ``exp`` and write the contract files into ``run_dir`` (which must exist)."""
    import torch  # here, not at the top: `attnlab --help` need not load PyTorch

    ctx = RunContext(run_dir, device, show_progress, command)
    t0 = time.perf_counter()
    with ctx.held:
        result = exp.run(cfg, ctx)
    seconds = time.perf_counter() - t0
    config = {"experiment": exp.name, **config_mod.to_json(cfg), "device": device}
    counts, where = tally(result.claims), machine(device)
    metrics = {
        "experiment": exp.name,
        "claims": [c.to_json() for c in result.claims],
        # "no claim fails", as `attnlab demo --strict` reads it: errata and findings are not failures
        "all_hold": counts["fails"] == 0,
        "claim_counts": counts,
        "seconds": round(seconds, 3),
        "attnlab_version": __version__,
        "torch_version": torch.__version__,
        "machine": where,  # a run is bit-reproducible only on the same kernels (core/machine.py)
        "command": command,  # what the docs print beside a number read from this file (docs/render.py checks it)
        **result.metrics,
    }
    write_json(run_dir / "config.json", config)
    write_json(run_dir / "metrics.json", metrics)
    write_atomic(run_dir / "report.md", experiment_report(exp, result, config, seconds, command, where))
    return result
