"""A grid run serially (one `attnlab reproduce` after another, as a shell loop does) against the same grid
through `attnlab sweep` with 2 local Ray workers; Ray's start-up alone; and, on paper, what the passkey
default grid costs as a sweep on N workers.

    python benchmarks/bench_sweep.py            # 16 cells of scansnap-fig4; ~6 min on 2 CPU cores

Each cell is a whole run (its process or Ray task, config, training, figures, report). Serial cells use
every core (torch's default threads); sweep cells one core each, two at a time (--cpus-per-cell 1).
"""
from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import add_out, need_tool, parser, positive_int, recorded  # benchmarks/host.py

EXPERIMENT = "scansnap-fig4"
AXES = {"eta_z": ["0.5", "1", "2", "4"], "seed": ["0", "1", "2", "3"]}
FIXED = ["sgd.steps=100"]

# passkey's default grid (5 scalings x lengths 4k/8k/16k x 3 depths x 2 samples): one prefill per (depth,
# sample), measured per length in benchmarks/README.md ("Long context"), plus loading SmolLM2 per cell.
PREFILL_S = {4096: 7.1, 8192: 18.7, 16384: 59.8}
LOAD_S, PREFILLS_PER_CELL, SCALINGS = 10.0, 6, 5


def attnlab(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnlab", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def serial(root: Path) -> float:
    t0 = time.perf_counter()
    for values in itertools.product(*AXES.values()):
        sets = FIXED + [f"{k}={v}" for k, v in zip(AXES, values)]
        attnlab("reproduce", EXPERIMENT, "--out", str(root / "_".join(values)),
                *[a for s in sets for a in ("--set", s)])
    return time.perf_counter() - t0


def sweep(root: Path, workers: int) -> float:
    grid = [a for k, v in AXES.items() for a in ("--grid", f"{k}={','.join(v)}")]
    return attnlab("sweep", EXPERIMENT, "--out", str(root), "--workers", str(workers), *grid,
                   *[a for s in FIXED for a in ("--set", s)])


def ray_start_up() -> float:
    code = ("import time, logging; t = time.perf_counter(); import ray; "
            "ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False); "
            "ray.get(ray.remote(lambda: 1).remote()); print(time.perf_counter() - t); ray.shutdown()")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def makespan(costs: list[float], workers: int) -> float:
    """Cells handed to whichever worker frees first, in submission order (what Ray's queue does)."""
    free = [0.0] * workers
    for c in costs:
        i = free.index(min(free))
        free[i] += c
    return max(free)


def passkey_on_paper() -> list[str]:
    cells = [LOAD_S + PREFILLS_PER_CELL * PREFILL_S[n] for _ in range(SCALINGS) for n in PREFILL_S]  # scaling x length
    longest_first = sorted(cells, reverse=True)
    rows = ["| workers | makespan, submission order | makespan, longest first | bound max(longest, total/N) |",
            "|---|---|---|---|"]
    for n in (1, 2, 4, 8, 15):
        bound = max(max(cells), sum(cells) / n)
        rows.append(f"| {n} | {makespan(cells, n) / 60:.1f} min | {makespan(longest_first, n) / 60:.1f} min | "
                    f"{bound / 60:.1f} min |")
    return rows


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--workers", type=positive_int, default=2)
    add_out(ap)
    args = ap.parse_args(argv)
    need_tool(ap, "ray", "pip install 'attnlab[sweep]'", module=True)
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    try:
        start = ray_start_up()
        t_serial = serial(root / "serial")
        t_sweep = sweep(root / "sweep", args.workers)
        t_resume = sweep(root / "sweep", args.workers)  # every cell done: nothing runs, Ray is not started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = len(list(itertools.product(*AXES.values())))
    print(f"# {n} cells of {EXPERIMENT} ({', '.join(FIXED)}; axes {AXES})")
    print("| run | wall time | per cell | ratio to serial |\n|---|---|---|---|")
    print(f"| serial: {n} x `attnlab reproduce` | {t_serial:.1f} s | {t_serial / n:.2f} s | 1.00 |")
    print(f"| `attnlab sweep --workers {args.workers}` | {t_sweep:.1f} s | {t_sweep / n:.2f} s | "
          f"{t_sweep / t_serial:.2f} |")
    print(f"| the same sweep again (all cells done) | {t_resume:.1f} s | | |")
    print(f"\nRay's start-up (init, one task, in a fresh process): {start:.1f} s\n")
    print("Passkey default grid as a sweep of scaling x length cells (15), on paper:\n")
    print("\n".join(passkey_on_paper()))


if __name__ == "__main__":
    main()
