"""Run an experiment into a folder: the experiment contract, for registered experiments and
ad-hoc commands (``attnlab stream``, ``passkey``, ``longppl``: experiments with no claims) alike.

``DIR/config.json`` (fully resolved config), ``DIR/metrics.json`` (claims, their counts by status,
and extra metrics; strict JSON), PNG figures and ``DIR/report.md``. Output is written into a hidden
staging folder beside DIR and moved into place only when everything is written, so a failed or
interrupted run never leaves a folder that looks complete, and a previous run in DIR stays intact
until the new one has succeeded. Staging folders of killed runs are removed by the next run.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from attnlab import __version__
from attnlab.core.errors import UsageError
from attnlab.core.io import NotPlaced, staged_dir, write_atomic, write_json
from attnlab.experiments import config as config_mod
from attnlab.experiments.claims import tally
from attnlab.experiments.registry import Experiment, Result
from attnlab.experiments.report import experiment_report

RUN_MARKERS = ("metrics.json", "index.html")  # files that mark a folder as attnlab output


@dataclass
class RunContext:
    """What a running experiment may use: its output folder, device, progress bars, and the
    command line that started it (ad-hoc commands record it in their metrics)."""

    out: Path
    device: str = "cpu"
    show_progress: bool = True
    command: str = ""

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


@contextlib.contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """:func:`attnlab.core.io.staged_dir` for ``--out``: the folder is checked first, and failures to
    write or to move the finished run into place are one-line usage errors naming --out."""
    out = Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder path")
    if out.is_dir() and any(out.iterdir()) and not any((out / m).exists() for m in RUN_MARKERS):
        raise UsageError(f"--out {out} already holds other files: choose an empty or new folder")
    if os.path.ismount(out):  # a mount point cannot be renamed, so a finished run could not replace it
        raise UsageError(f"--out {out} is a mount point: give a folder inside it, e.g. --out {out / 'run'}")
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
    except OSError as e:
        if phase != "setup":
            raise
        raise UsageError(f"cannot write to --out {out} ({e.strerror}): choose a writable folder") from None


def run_into(exp: Experiment, cfg: Any, out: Path, device: str, command: str) -> Result:
    """Run ``exp`` into the folder ``out`` through a staging folder (see :func:`staged_output`)."""
    with staged_output(out) as stage:
        return execute(exp, cfg, stage, device, True, command)


def execute(exp: Experiment, cfg: Any, run_dir: Path, device: str, show_progress: bool, command: str) -> Result:
    """Run ``exp`` and write the contract files into ``run_dir`` (which must exist)."""
    import torch  # here, not at the top: `attnlab --help` need not load PyTorch

    ctx = RunContext(run_dir, device, show_progress, command)
    t0 = time.perf_counter()
    result = exp.run(cfg, ctx)
    seconds = time.perf_counter() - t0
    config = {"experiment": exp.name, **config_mod.to_json(cfg), "device": device}
    counts = tally(result.claims)
    metrics = {
        "experiment": exp.name,
        "claims": [c.to_json() for c in result.claims],
        # "no claim fails", as `attnlab demo --strict` reads it: errata and findings are not failures
        "all_hold": counts["fails"] == 0,
        "claim_counts": counts,
        "seconds": round(seconds, 3),
        "attnlab_version": __version__,
        "torch_version": torch.__version__,
        **result.metrics,
    }
    write_json(run_dir / "config.json", config)
    write_json(run_dir / "metrics.json", metrics)
    write_atomic(run_dir / "report.md", experiment_report(exp, result, config, seconds, command))
    return result
