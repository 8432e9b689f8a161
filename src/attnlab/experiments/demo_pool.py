"""The demo's experiments side by side: independent quick runs in worker processes of one thread each.

Most quick runs are small tensor programs that one core runs about as fast as two (their matrices are too
small to split), so two of them side by side finish sooner than one after the other with both threads. An
experiment that starts worker processes of its own (a ``workers`` setting above 1) runs alone with every
core; those go first, while every core is free. The rest start longest first (``QUICK_SECONDS``), so that no
long run is left to finish alone on one core at the end: the classic longest-processing-time rule, within
4/3 of the best schedule. Until the first run that reads a model has finished (it may have fetched the model
on first use), no other run that reads one starts beside it; the others do. Reports come back in the talk's
order, whatever order the runs finish in.
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

# Seconds each quick run took on one thread of an AMD EPYC (2 cores), beside another run, in the fresh-machine
# demo (benchmarks/results/demo-fresh-machine/report.md); only the order they give matters. Workers>1 runs
# and ones not listed here (assumed short) need no entry.
QUICK_SECONDS = {
    "accuracy-table": 181, "h2o-ppl": 127, "streaming-ppl": 75, "scansnap-fig6": 58, "joma-wikitext": 49,
    "dejavu": 42, "contextual-sparsity": 39, "streameval": 39, "joma-hierarchy-controls": 37,
    "kv-leaderboard": 30, "recall-under-eviction": 26,
    "dejavu-relu": 21, "probes": 21, "scansnap-fig7": 21, "joma-hierarchy": 16,
    "quant-agreement": 14, "joma-invariants": 14, "dejavu-curve": 13,
}
UNLISTED_SECONDS = 5


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


def cores_needed(cfg) -> int:
    """2 (every core, run alone) for an experiment config that starts worker processes of its own, else 1."""
    return 2 if int(getattr(cfg, "workers", 1) or 1) > 1 else 1


def _reads_a_model(cfg) -> bool:
    return isinstance(getattr(cfg, "model", None), str)


def schedule(exps: list[registry.Experiment], need: dict[str, int]) -> list[registry.Experiment]:
    """The order runs start in: every-core runs first (in the talk's order), then longest first."""
    alone = [e for e in exps if need[e.name] > 1]
    rest = sorted((e for e in exps if need[e.name] == 1), key=lambda e: -QUICK_SECONDS.get(e.name, UNLISTED_SECONDS))
    return alone + rest


def run_side_by_side(exps: list[registry.Experiment], stage: Path, device: str, quick: bool,
                     cores: int = 2) -> list[DemoRun | Skipped]:
    """Every experiment of ``exps`` into ``stage``, ``cores`` one-thread runs at a time (see the module)."""
    cfgs = {e.name: runner.resolve_config(e, {}, None, quick=quick) for e in exps}
    need = {n: min(cores, cores_needed(cfg)) for n, cfg in cfgs.items()}
    model = {n for n, cfg in cfgs.items() if _reads_a_model(cfg)}
    pending, running, done = schedule(exps, need), {}, {}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn")) as pool:
        while pending or running:
            free = cores - sum(need[n] for n in running.values())
            # until a run that reads a model has finished (it may have fetched it), no second one starts
            fetched = bool(model & done.keys())
            fetching = not fetched and bool(model & set(running.values()))
            for exp in [e for e in pending if need[e.name] <= free]:  # a shorter run may pass one that must wait
                if need[exp.name] > free or (fetching and exp.name in model):
                    continue
                fetching = fetching or (not fetched and exp.name in model)
                pending.remove(exp)
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
