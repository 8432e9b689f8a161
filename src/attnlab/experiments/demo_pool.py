"""The demo's experiments two at a time: independent quick runs in worker processes of one thread each.

Most quick runs are small tensor programs that one core runs about as fast as two (their matrices are too
small to split), so two of them side by side finish sooner than one after the other with both threads. An
experiment that starts worker processes of its own (a ``workers`` setting above 1) runs alone with every
core. Reports come back in the talk's order, whatever order the runs finish in.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

from attnlab.core.errors import MissingResource
from attnlab.experiments import registry, runner
from attnlab.experiments.report import DemoRun, Skipped


def run_one(exp: registry.Experiment, stage: Path, device: str, quick: bool, progress: bool) -> DemoRun | Skipped:
    """One demo experiment into ``stage/<name>``; a missing corpus or model skips it with one line."""
    cfg = runner.resolve_config(exp, {}, None, quick=quick)
    run_dir = stage / exp.name
    run_dir.mkdir()
    command = f"attnlab reproduce {exp.name} --out {exp.name}" + (" --quick" if quick else "")
    t0 = time.perf_counter()
    try:
        result = runner.execute(exp, cfg, run_dir, device, progress, command)
    except MissingResource as e:  # real-text experiments need a corpus or model this machine may lack
        shutil.rmtree(run_dir)
        print(f"[demo] {exp.name}: skipped ({e})", file=sys.stderr, flush=True)
        return Skipped(exp.name, exp.part, str(e))
    return DemoRun(exp.name, exp.summary, exp.part, exp.name, result, time.perf_counter() - t0)


def _job(name: str, stage: Path, device: str, quick: bool, threads: int) -> DemoRun | Skipped:
    import torch

    torch.set_num_threads(threads)
    exp = registry.load_all()[name]
    return run_one(exp, stage, device, quick, progress=False)


def cores_needed(exp: registry.Experiment, quick: bool, first_model: bool) -> int:
    """2 (every core, run alone) for an experiment that starts worker processes of its own, and for the first
    that reads a model (it may fetch it on first use: two runs must not both fetch it); else 1."""
    cfg = runner.resolve_config(exp, {}, None, quick=quick)
    return 2 if int(getattr(cfg, "workers", 1) or 1) > 1 or first_model else 1


def _reads_a_model(exp: registry.Experiment, quick: bool) -> bool:
    return isinstance(getattr(runner.resolve_config(exp, {}, None, quick=quick), "model", None), str)


def run_side_by_side(exps: list[registry.Experiment], stage: Path, device: str, quick: bool,
                     cores: int = 2) -> list[DemoRun | Skipped]:
    """Every experiment of ``exps`` into ``stage``, ``cores`` one-thread runs at a time (see the module)."""
    first = next((e.name for e in exps if _reads_a_model(e, quick)), None)
    need = {e.name: min(cores, cores_needed(e, quick, e.name == first)) for e in exps}
    pending, running, done = list(exps), {}, {}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn")) as pool:
        while pending or running:
            free = cores - sum(need[n] for n in running.values())
            while pending and need[pending[0].name] <= free:  # the talk's order, no overtaking
                exp = pending.pop(0)
                threads = 1 if need[exp.name] == 1 else max(1, os.cpu_count() or 1)
                print(f"[demo] {len(done) + len(running) + 1}/{len(exps)} {exp.name} ({exp.part}) ...",
                      file=sys.stderr, flush=True)
                running[pool.submit(_job, exp.name, stage, device, quick, threads)] = exp.name
                free -= need[exp.name]
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                name = running.pop(f)
                done[name] = f.result()
                took = getattr(done[name], "seconds", None)
                print(f"[demo] {name} done" + (f" in {took:.1f} s" if took is not None else "") +
                      f" ({time.perf_counter() - t0:.0f} s so far)", file=sys.stderr, flush=True)
    return [done[e.name] for e in exps]
