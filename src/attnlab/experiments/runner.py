"""Run an experiment into a folder: the experiment contract.

``DIR/config.json`` (fully resolved config), ``DIR/metrics.json`` (claims and extra
metrics), PNG figures and ``DIR/report.md``. Output is written into a hidden staging folder
beside DIR and moved into place only when everything is written, so a failed or
interrupted run never leaves a folder that looks complete, and a previous run in DIR
stays intact until the new one has succeeded.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from attnlab import __version__
from attnlab.core.errors import UsageError
from attnlab.experiments import config as config_mod
from attnlab.experiments.registry import Experiment, Result
from attnlab.experiments.report import experiment_report

RUN_MARKERS = ("metrics.json", "index.html")  # files that mark a folder as attnlab output


@dataclass
class RunContext:
    """What a running experiment may use: its output folder, device and progress bars."""

    out: Path
    device: str = "cpu"
    show_progress: bool = True

    def progress(self, total: int, desc: str):
        """A tqdm bar with ETA on stderr (hidden when stderr is not a terminal)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=None if self.show_progress else True, leave=False, file=sys.stderr)

    def savefig(self, fig, name: str) -> str:
        import matplotlib.pyplot as plt

        fig.savefig(self.out / name, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return name


def check_device(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device {device}: use cpu or cuda")
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


@contextlib.contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Yield a fresh staging folder; on success it replaces ``out`` atomically (same parent)."""
    out = Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder path")
    if out.is_dir() and any(out.iterdir()) and not any((out / m).exists() for m in RUN_MARKERS):
        raise UsageError(f"--out {out} already holds other files: choose an empty or new folder")
    created = [p for p in out.parents if not p.exists()]  # removed again if the run fails
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = out.parent / f".{out.name}.partial-{os.getpid()}-{time.monotonic_ns()}"
        stage.mkdir()
    except OSError as e:
        raise UsageError(f"cannot write to --out {out} ({e.strerror}): choose a writable folder") from None
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for p in created:  # innermost first; only folders this run made, and only if still empty
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    old = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
    if out.exists():
        out.rename(old)
    stage.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def execute(exp: Experiment, cfg: Any, run_dir: Path, device: str, show_progress: bool, command: str) -> Result:
    """Run ``exp`` and write the contract files into ``run_dir`` (which must exist)."""
    ctx = RunContext(run_dir, device, show_progress)
    t0 = time.perf_counter()
    result = exp.run(cfg, ctx)
    seconds = time.perf_counter() - t0
    config = {"experiment": exp.name, **config_mod.to_json(cfg), "device": device}
    metrics = {
        "experiment": exp.name,
        "claims": [c.to_json() for c in result.claims],
        "all_hold": all(c.holds for c in result.claims),
        "seconds": round(seconds, 3),
        "attnlab_version": __version__,
        "torch_version": torch.__version__,
        **result.metrics,
    }
    _write_json(run_dir / "config.json", config)
    _write_json(run_dir / "metrics.json", metrics)
    (run_dir / "report.md").write_text(experiment_report(exp, result, config, seconds, command))
    return result


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, allow_nan=True) + "\n")
