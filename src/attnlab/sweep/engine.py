"""Ray, the one engine a sweep runs on: local by default, an existing cluster by address.

Ray is imported here only, when a sweep starts: no other command pays for it. Each cell is one Ray
task asking for ``cpus_per_cell`` CPUs; Ray schedules the tasks over the cluster's CPUs (locally,
``workers x cpus_per_cell`` of them), and the driver takes each result as it finishes. A Ray started
here stops with the sweep however the sweep stops, ``kill -9`` included (:mod:`attnlab.sweep.reaper`).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
from contextlib import contextmanager
from typing import Callable, Hashable

from attnlab.core.errors import UsageError
from attnlab.sweep import reaper
from attnlab.sweep.cell import CellJob, run_cell

INSTALL = "pip install 'attnlab[sweep]'"
_joined = False  # connect() started or joined Ray in this process: its disconnect ends the job, and Ray its tasks


def require() -> None:
    """Refuse (one line, naming the install) before anything is written, where Ray is not installed."""
    _ray()


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"attnlab sweep runs its cells on Ray, which is not installed here: {INSTALL}") from None
    return ray


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that answers no TCP connection fails here in seconds: Ray itself
    would retry for minutes before it gives up."""
    import socket

    if address == "auto":
        return  # Ray looks it up on this machine and says at once when there is none
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--address {address}: write auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise UsageError(f"cannot reach the Ray cluster at --address {address} ({e.strerror or e}): check the "
                         "address (`ray status` on the head node) or drop --address to run here") from None


def connect(address: str | None, num_cpus: int) -> Callable[[], None]:
    """Start Ray on this machine with ``num_cpus`` CPUs (``address`` None) or join the cluster at ``address``
    (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``; :func:`check_reachable` it first). Returns how to
    disconnect (nothing, if Ray was up already)."""
    ray = _ray()
    if ray.is_initialized():  # e.g. a notebook or a test that started Ray: use it, leave it running
        return lambda: None
    quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
    # a Ray started here stops with this process, even when it is SIGKILLed (see attnlab.sweep.reaper)
    watchdog = reaper.start(reaper.children(os.getpid())) if address is None else None
    try:
        if address is None:
            ray.init(address="local", num_cpus=num_cpus, **quiet)  # "local": a new instance, never a user's
        else:
            ray.init(address=address, **quiet)
    except Exception as e:  # noqa: BLE001 -- Ray raises ConnectionError, RuntimeError, ValueError... for one cause
        _release(watchdog)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        where = f"the Ray cluster at --address {address}" if address else "a local Ray instance"
        fix = "check the address (`ray status` on the head node) or drop --address to run here" if address else \
            "see `ray start --head` to start one by hand"
        raise UsageError(f"cannot start or reach {where} ({first}): {fix}") from None

    global _joined
    _joined = True

    def disconnect() -> None:
        global _joined
        _joined = False
        ray.shutdown()
        _release(watchdog)

    return disconnect


def _release(watchdog: subprocess.Popen | None) -> None:
    """Close the watchdog's pipe: it stops what Ray's shutdown left running, and ends."""
    if watchdog is not None:
        watchdog.stdin.close()
        try:
            watchdog.wait(timeout=2 * reaper.GRACE + 5)
        except subprocess.TimeoutExpired:
            pass  # it finishes on its own


@contextmanager
def interruptible():
    """Ctrl-C and ``kill`` (SIGTERM, also what cluster schedulers send) both raise KeyboardInterrupt in the
    driver, so a sweep stopped either way says where its finished cells are (Ray's own SIGTERM handler would
    exit without a word). A SIGINT this process was started ignoring (``cmd &`` in a script) stays ignored.
    Yields a dict whose "signal" says which signal stopped the sweep (Ray may re-raise the interrupt as its own)."""
    stopped = {"signal": signal.SIGINT}

    def stop(signum, frame):
        stopped["signal"] = signal.Signals(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGTERM, before)


def run_all(jobs: dict[Hashable, CellJob], cpus_per_cell: int, on_done: Callable[[Hashable, dict], None]) -> None:
    """Run every job as a Ray task; ``on_done(key, outcome)`` as each finishes, in finishing order."""
    ray = _ray()
    task = ray.remote(num_cpus=cpus_per_cell, max_retries=1)(run_cell)  # one retry: a lost node, not a bug
    pending = {task.remote(job): key for key, job in jobs.items()}
    try:
        _collect(ray, pending, on_done)
    except BaseException:  # interrupted, or on_done could not write: stop the cells still running or queued
        if not _joined:  # Ray outlives this sweep (a notebook's, a test's): cancel them here. Otherwise disconnect
            for ref in pending:  # ends the job and Ray its tasks; cancelling as well races Ray's bookkeeping
                ray.cancel(ref, force=True)  # (Ray 2.60 aborted the driver once: "complete task that was not pending")
        raise


def _collect(ray, pending: dict, on_done: Callable[[Hashable, dict], None]) -> None:
    while pending:
        # a timeout, so the driver returns to Python now and then: a signal's handler runs between waits
        done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in done:
            key = pending.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError as e:  # the worker died (killed, out of memory): the cell failed
                outcome = {"status": "failed", "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}",
                           "traceback": str(e), "seconds": 0.0}
            on_done(key, outcome)
