"""The local Ray of a sweep stops when the sweep stops, however it stops -- ``kill -9`` included.

Ray ties the processes ``ray.init`` starts to the driver (the kernel kills them when it dies), but not
their own children: a SIGKILLed driver leaves raylet's agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) running for good. So a sweep that starts Ray on this machine first starts
this watchdog, in a session of its own (a Ctrl-C or a closed terminal does not reach it). It follows
the children the driver starts from then on (Ray's) and every process below them (workers come and
go), reading the process table twice a second. Its stdin is a pipe whose other end only the driver
holds, so the kernel closes it when the driver ends, normally or not; then the watchdog stops the
processes it followed that still run: SIGTERM, then SIGKILL for those still there after a grace
period. A process is known by its pid and start time, so a reused pid is never hit, and nothing the
driver did not start (a Ray cluster the user started with ``ray start``) is ever among them.

Linux reads /proc; elsewhere ``ps``. Run as ``python -m attnlab.sweep.reaper DRIVER_PID [PID:START ...]``
(the driver's children before, which it leaves alone).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections import defaultdict

POLL = 0.5  # seconds between looks at the process table
GRACE = 3.0  # seconds between SIGTERM and SIGKILL

Process = tuple[int, str]  # (pid, start time): a pid alone may be reused


def table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every live (not zombie) process on this machine."""
    found = {}
    if os.path.isdir("/proc/self"):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    stat = f.read()
            except OSError:  # gone meanwhile
                continue
            fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
            if fields[0] != "Z":  # fields: state, ppid, ..., starttime (the 19th after the state)
                found[int(entry.name)] = (int(fields[1]), fields[19])
        return found
    ps = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "stat=", "-o", "lstart="],
                        capture_output=True, text=True).stdout
    for line in ps.splitlines():
        pid, ppid, state, start = line.split(None, 3)
        if not state.startswith("Z"):
            found[int(pid)] = (int(ppid), start)
    return found


def descendants(roots: set[Process], procs: dict[int, tuple[int, str]]) -> set[Process]:
    """The processes of ``roots`` still alive, and every process below them."""
    children = defaultdict(list)
    for pid, (ppid, _) in procs.items():
        children[ppid].append(pid)
    todo = [pid for pid, start in roots if procs.get(pid, (0, None))[1] == start]
    found: set[Process] = set()
    while todo:
        pid = todo.pop()
        if (pid, procs[pid][1]) not in found:
            found.add((pid, procs[pid][1]))
            todo += children[pid]
    return found


def children(pid: int, procs: dict[int, tuple[int, str]] | None = None) -> set[Process]:
    return {(p, start) for p, (ppid, start) in (procs or table()).items() if ppid == pid}


def stop(processes: set[Process], grace: float = GRACE) -> set[Process]:
    """SIGTERM each process still alive, SIGKILL those still there after ``grace`` seconds; the ones signalled."""
    alive = lambda: {(p, s) for p, s in processes if table().get(p, (0, None))[1] == s}  # noqa: E731
    hit = alive()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in alive():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    return hit


def watch(driver: int, before: set[Process], pipe=sys.stdin) -> set[Process]:
    """Follow the children ``driver`` starts (not in ``before``, not this process) and all below them until
    ``pipe`` ends (the driver is done, or gone), then stop them; the processes stopped."""
    fd, followed = pipe.fileno(), set()
    while True:
        ready, _, _ = select.select([fd], [], [], POLL)
        done = ready and not os.read(fd, 4096)  # end of file: the driver closed it, or died
        followed = follow(followed, driver, before, table())
        if done:
            return stop(followed)


def follow(followed: set[Process], driver: int, before: set[Process], procs: dict[int, tuple[int, str]],
           me: int | None = None) -> set[Process]:
    """``followed``, plus the children of ``driver`` not in ``before`` (nor ``me``, the watchdog), plus all the
    live processes below either: one look at the process table ``procs``."""
    me = os.getpid() if me is None else me
    new = {(p, s) for p, s in children(driver, procs) - before if p != me}
    return followed | descendants(followed | new, procs)


def start(before: set[Process]) -> subprocess.Popen | None:
    """Start the watchdog of this process's children not in ``before`` (its ``children(os.getpid())`` taken
    just before), e.g. the ones ``ray.init`` starts next. Close its stdin (or end) to make it stop them.
    None where it cannot start: the sweep runs all the same."""
    argv = [sys.executable, "-m", "attnlab.sweep.reaper", str(os.getpid()), *(f"{p}:{s}" for p, s in sorted(before))]
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # its own session: a Ctrl-C or a closed terminal misses it
    except OSError:
        return None


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the end of stdin stops it
    watch(int(argv[0]), {(int(p), s) for p, _, s in (a.partition(":") for a in argv[1:])})


if __name__ == "__main__":
    main(sys.argv[1:])
