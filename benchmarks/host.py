"""What the benchmarks say about the machine they ran on: the CPU as /proc names it, and the process's
memory (resident, peak resident, and resident after glibc's malloc_trim). One place, so every figure in
benchmarks/README.md names its machine and measures memory the same way. Imported as ``host`` (the
benchmarks run as scripts, so their folder is on the path)."""
from __future__ import annotations

import ctypes
import os
import platform
import resource
from pathlib import Path

import torch


def machine() -> str:
    """This CPU, its cores and torch's threads: a run resumed elsewhere says where each stretch ran."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}"


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_mib() -> tuple[float, float, float]:
    """(resident, peak resident, resident after malloc_trim) MiB of this process. glibc keeps freed memory for
    reuse, so RSS drifts with fragmentation; after malloc_trim it is what the process really holds. Without
    /proc: the peak three times; without glibc: no trim."""
    try:
        rss, peak = _proc_status()
    except (OSError, KeyError):
        peak = peak_rss_mib()
        return peak, peak, peak
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return rss, peak, rss
    return rss, peak, _proc_status()[0]


def _proc_status() -> tuple[float, float]:
    """(VmRSS, VmHWM) MiB from /proc/self/status."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024
