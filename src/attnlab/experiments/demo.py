"""`attnlab demo`: the demo experiments in the talk's order, into one folder read like the talk."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from attnlab.core.cache import OFFLINE_HELP, go_offline
from attnlab.core.errors import UsageError
from attnlab.core.io import write_atomic
from attnlab.experiments import registry, runner
from attnlab.experiments.claims import describe, tally
from attnlab.experiments.demo_pool import run_one, run_side_by_side
from attnlab.experiments.report import DemoRun, demo_report_md
from attnlab.experiments.report_html import demo_index_html

DEMO_EXPERIMENTS: tuple[str, ...] | None = None  # None: every experiment registered with demo=True


def demo_experiments() -> list[registry.Experiment]:
    """The experiments the demo runs, in the talk's order (the registry's)."""
    exps = registry.load_all().values()
    if DEMO_EXPERIMENTS is not None:
        return [e for e in exps if e.name in DEMO_EXPERIMENTS]
    return [e for e in exps if e.demo]


def add_demo(sub) -> None:
    """Add ``attnlab demo`` to the argparse subparsers ``sub``."""
    p = sub.add_parser(
        "demo",
        help="run the experiments on their quick settings and write one report (index.html + report.md)",
        description="Run every demo experiment (quick settings where an experiment has them) into one folder, "
        "in the order of the talk: an index.html that opens with a summary table and shows every figure and "
        "every claim with its status (holds, fails with the reason, unresolved where its interval straddles the "
        "tolerance, erratum with its correction, finding), "
        "and the same as report.md. The texts it reads ship with attnlab; SmolLM2-135M is fetched the first "
        "time it is needed (~100 MB, once; --offline skips those experiments instead). H2O's XSum file does "
        "not ship (research-use licence): h2o-xsum runs where $ATTNLAB_DATA or ./data holds "
        "xsum/xsum_0shot.jsonl. The long-context ones (passkey, rope-zero-shot, pi-finetune) take too "
        "long for a demo: run them with `attnlab reproduce`.",
    )
    p.add_argument("--out", default="attnlab-demo", type=Path, help="report folder (default: ./attnlab-demo)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--full", action="store_true", help="use each experiment's full settings, not the quick ones")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any claim fails (unresolved claims, errata and findings never count as "
                   "failures)")
    p.add_argument("--offline", action="store_true", help=OFFLINE_HELP)
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="experiments run side by side, one thread each (default: 2 on a CPU with 2 or more cores, "
                   "else 1; 1 runs them one after the other with every thread and progress bars)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    """Run the demo into ``args.out``; 1 with ``--strict`` when a claim fails, else 0."""
    device = runner.check_device(args.device)
    if args.offline:
        go_offline()
    settings = f"{'full' if args.full else 'quick'} settings, {device}"
    jobs = args.jobs if args.jobs is not None else (2 if device == "cpu" and (os.cpu_count() or 1) >= 2 else 1)
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: give 1 or more")
    exps = demo_experiments()
    t0 = time.perf_counter()
    runs, skipped = [], []
    with runner.staged_output(args.out, "demo") as stage:
        if jobs > 1:
            done_all = run_side_by_side(exps, stage, device, quick=not args.full, cores=jobs)
        else:
            done_all = []
            for i, exp in enumerate(exps, 1):
                print(f"[demo] {i}/{len(exps)} {exp.name} ({exp.part}) ...", file=sys.stderr, flush=True)
                done_all.append(run_one(exp, stage, device, quick=not args.full, progress=True))
        for done in done_all:
            (runs if isinstance(done, DemoRun) else skipped).append(done)
        seconds = time.perf_counter() - t0
        write_atomic(stage / "index.html", demo_index_html(runs, skipped, seconds, settings))
        write_atomic(stage / "report.md", demo_report_md(runs, skipped, seconds, settings))
    counts = tally(c for r in runs for c in r.result.claims)
    out = args.out.expanduser().absolute()
    print(f"attnlab demo: {describe(counts)} in {seconds:.0f} s")
    print(f"report: {out / 'index.html'}  (and {out / 'report.md'})")
    if args.strict and counts["fails"]:  # unresolved claims, errata and findings are not failures
        print(f"attnlab demo: --strict: {counts['fails']} claim(s) fail", file=sys.stderr)
        return 1
    return 0
