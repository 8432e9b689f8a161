"""Independent jobs in worker processes on this machine: the runs of one experiment that share nothing
(a training run per attention variant, a stream per KV policy).

Small models use one core better than two (their matrices are too small to split), so ``workers``
processes with ``cores // workers`` threads each finish a set of runs sooner than one process with every
thread. Processes are spawned, not forked, so no OpenMP state is inherited; a job is a module-level
function and picklable arguments. Results come back in the jobs' order, whatever order they finished in.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any, Callable

import torch


def _threaded(fn: Callable, threads: int, args: tuple) -> Any:
    torch.set_num_threads(threads)
    return fn(*args)


def in_processes(fn: Callable, jobs: dict[str, tuple], workers: int, progress=None) -> dict[str, Any]:
    """{name: fn(*args)} for ``jobs`` {name: args}, ``workers`` at once (``progress.update(1)`` per job done)."""
    workers = max(1, min(workers, len(jobs)))
    threads = max(1, (os.cpu_count() or 1) // workers)
    done = {}
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_threaded, fn, threads, args): name for name, args in jobs.items()}
        for f in as_completed(futures):
            done[futures[f]] = f.result()
            if progress is not None:
                progress.update(1)
    return {name: done[name] for name in jobs}
