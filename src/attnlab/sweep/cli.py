"""``attnlab sweep``: a registered experiment over a grid of settings and seeds, each cell an ordinary
run, scheduled as Ray tasks on this machine or on a Ray cluster."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from attnlab.core.errors import UsageError

GROUP = "experiments"
# carried to the workers, so cells find (and may fetch) what this shell finds
DATA_ENV = ("ATTNLAB_DATA", "ATTNLAB_CACHE", "ATTNLAB_OFFLINE", "HF_HOME")

EPILOG = """examples:
  attnlab sweep scansnap-fig4 --grid eta_z=0.5,1,2 --seeds 4 --out runs/fig4-sweep
  attnlab sweep passkey --grid "lengths=2048;4096;8192;16384" --grid "scalings=none;pi;ntk;yarn" \\
      --set factor=2 --metric accuracy --out runs/passkey-sweep   # one cell per length x scaling
  attnlab sweep streaming-ppl --grid budget=128,256,512 --grid n_sink=2,4 --metric ppl.dense --out runs/kv
  attnlab sweep scansnap-fig4 --grid eta_z=0.5,1,2 --out runs/x --address auto   # an existing Ray cluster

A cell is `attnlab reproduce EXPERIMENT --set ...` for its grid values (its folder: DIR/cells/<cell>).
Re-running the same command skips the cells already done and retries the failed ones; a killed sweep
loses no finished cell. DIR/sweep.md tabulates every cell's claims, DIR/sweep.png draws them against
the first axis. Ray starts on this machine unless --address names a cluster (every node needs attnlab
installed, and the data the experiment reads under the same path or $ATTNLAB_DATA). Ray runs its workers
at niceness 15: on an idle machine that costs nothing, but beside other busy processes the cells get only
the CPU those leave (two plain runs on 2 cores leave them almost none).

If a sweep dies (Ctrl-C, kill, kill -9, a closed terminal), run the same command again. A Ray started
here stops with the sweep within seconds however it ended (a watchdog, `python -m attnlab.sweep.reaper`,
sees to it); `pgrep -af 'ray::|raylet|gcs_server'` shows anything left if that watchdog was killed too."""


def add_commands(sub) -> None:
    p = sub.add_parser("sweep", help="run an experiment over a grid of settings and seeds, on Ray (local or a cluster)",
                       description="Run a registered experiment once per cell of a grid (the product of every "
                       "--grid axis and the seeds), each cell an ordinary run folder, scheduled as Ray tasks.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="EXPERIMENT", help="a registered experiment (see `attnlab list`)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="one axis of the grid (repeatable); a list-valued key separates its values with ';'")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting shared by every cell (repeatable)")
    p.add_argument("--seeds", type=int, help="N seeds: an axis seed=0..N-1 (or seeds=N where the experiment batches "
                   "its seeds)")
    p.add_argument("--out", type=Path, required=True, help="the sweep's folder (re-use it to resume)")
    p.add_argument("--quick", action="store_true", help="every cell on the experiment's quick settings")
    p.add_argument("--metric", action="append", default=[], metavar="PATH",
                   help="a value of metrics.json to tabulate and plot, as a dotted path (e.g. ppl.dense); repeatable")
    p.add_argument("--address", help="join this Ray cluster (auto, HOST:PORT or ray://HOST:PORT) instead of "
                   "starting Ray here")
    p.add_argument("--cpus-per-cell", type=int, default=1, metavar="K", help="CPUs (and torch threads) per cell "
                   "(default 1: small models use one core best)")
    p.add_argument("--workers", type=int, metavar="N", help="cells at once on this machine (default: its cores / K); "
                   "not with --address, where the cluster's CPUs decide")
    p.add_argument("--device", default="cpu", help="cpu or cuda, for every cell")
    p.set_defaults(func=cmd_sweep)


def _jobs(args, exp, grid, todo, out: Path) -> dict:
    from attnlab.experiments import runner
    from attnlab.sweep import store
    from attnlab.sweep.cell import CellJob

    env = tuple((k, os.environ[k]) for k in DATA_ENV if k in os.environ)
    jobs = {}
    for cell in todo:
        argv = ["reproduce", exp.name, "--out", str(store.cell_dir(out, cell))]
        argv += [a for k, v in cell.overrides.items() for a in ("--set", f"{k}={v}")]
        argv += ["--quick"] if grid.quick else []
        jobs[cell] = CellJob(exp.name, cell.overrides, grid.quick, args.device, args.cpus_per_cell,
                             runner.command_line(argv), os.getcwd(), env)
    return jobs


def _check_args(args) -> None:
    if args.cpus_per_cell < 1:
        raise UsageError(f"--cpus-per-cell {args.cpus_per_cell}: use at least 1")
    if args.workers is not None and (args.workers < 1 or args.address):
        raise UsageError("--workers N (N >= 1) sets how many cells run at once on this machine; with --address the "
                         "cluster's CPUs decide: drop one of them")


def cmd_sweep(args) -> int:
    from tqdm.auto import tqdm

    from attnlab.experiments import registry, runner
    from attnlab.experiments.config import parse_overrides
    from attnlab.sweep import engine, report, store
    from attnlab.sweep.grid import make_grid

    _check_args(args)
    exp = registry.get(args.name)
    runner.check_device(args.device)
    grid = make_grid(exp.name, exp.config_cls, args.grid, parse_overrides(args.overrides), args.seeds, args.quick)
    cells = grid.cells()
    for cell in cells:  # every cell's config resolves before anything is written or started
        try:
            runner.resolve_config(exp, cell.overrides, None, grid.quick)
        except UsageError as e:
            raise UsageError(f"cell {cell.name}: {e}") from None
    engine.require()
    if args.address:
        engine.check_reachable(args.address)  # a wrong address is named before the folder is touched
    out = store.claim_dir(args.out, grid)
    todo = [c for c in cells if not store.is_complete(out, c)]
    failed: list[str] = []
    if todo:
        workers = args.workers or max(1, (os.cpu_count() or 1) // args.cpus_per_cell)
        disconnect = engine.connect(args.address, workers * args.cpus_per_cell)
        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"sweep {exp.name}", unit="cell")
        table, line_of = report.rows(out, grid, args.metric), {c.name: i for i, c in enumerate(grid.cells())}

        def on_done(cell, outcome: dict) -> None:
            if outcome["status"] == "ok":
                store.place(out, cell, outcome["files"], outcome["seconds"])
                store.clear_failure(out, cell)
            else:
                store.record_failure(out, cell, outcome)
                failed.append(f"{cell.name}: {outcome['error']}")
                bar.write(f"attnlab sweep: cell {cell.name} failed: {outcome['error']}", file=sys.stderr)
            bar.update(1)
            bar.set_postfix(failed=len(failed))
            table[line_of[cell.name]] = report.row(out, cell, args.metric)  # re-read this cell only
            report.write(out, grid, args.metric, figure=False, table=table)  # current after every cell

        stopped = {"signal": signal.SIGINT}  # a Ctrl-C before the `with` binds its own
        try:
            with engine.interruptible() as stopped:
                engine.run_all(_jobs(args, exp, grid, todo, out), args.cpus_per_cell, on_done)
        except KeyboardInterrupt:  # Ctrl-C or kill
            report.write(out, grid, args.metric)
            print(f"attnlab sweep: interrupted; the finished cells are kept in {out}: run the same command to "
                  "finish the others", flush=True)
            return 128 + stopped["signal"]
        finally:
            bar.close()
            disconnect()
    table = report.write(out, grid, args.metric)
    done = sum(r["status"] == "done" for r in table)
    print(f"sweep {exp.name}: {done}/{len(cells)} cells done ({len(cells) - len(todo)} were already), "
          f"{len(failed)} failed; table: {out / 'sweep.md'}")
    return 1 if failed else 0
