"""What the benchmarks say about the machine they ran on: the CPU as /proc names it, and the process's
memory (resident, peak resident, and resident after glibc's malloc_trim). One place, so every figure in
benchmarks/README.md names its machine and measures memory the same way; and one ``--out DIR``, so every
figure there comes from a committed file (``recorded``). Imported as ``host`` (the benchmarks run as
scripts, so their folder is on the path)."""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import io
import json
import os
import resource
import shlex
import sys
from pathlib import Path

from attnlab.core.io import write_atomic
from attnlab.core.machine import machine  # the benchmarks name their machine as host.machine()


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


def add_out(parser: argparse.ArgumentParser) -> None:
    """The ``--out DIR`` every benchmark takes: where its printed report and its figures are kept."""
    parser.add_argument("--out", type=_folder, default=None, metavar="DIR",
                        help="also keep the report: DIR/result.md (what was printed) and DIR/result.json "
                             "(the command, machine, date and figures), e.g. benchmarks/results/bench-NAME")


def _folder(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; name a folder, e.g. benchmarks/results/bench-NAME")
    return path


@contextlib.contextmanager
def recorded(out: Path | None, figures: dict | None = None):
    """Print as usual; with ``out``, also keep what was printed (DIR/result.md) and ``figures`` -- filled in
    by the caller while it runs -- with the command, machine and date (DIR/result.json). Both are written
    aside and renamed, and only once the benchmark has finished: a run that fails leaves a previous
    result as it was."""
    if out is None:
        yield
        return
    captured = io.StringIO()
    stdout = sys.stdout
    sys.stdout = _Tee(stdout, captured)
    try:
        yield
    finally:
        sys.stdout = stdout
    command = "python " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    meta = {"command": command, "machine": machine(), "date": datetime.date.today().isoformat()}
    out.mkdir(parents=True, exist_ok=True)
    head = f"`{command}`\n\n{meta['machine']}, {meta['date']}\n\n"
    write_atomic(out / "result.md", head + captured.getvalue())
    write_atomic(out / "result.json", json.dumps({**meta, **(figures or {})}, indent=2, default=str) + "\n")
    print(f"kept in {out}/result.md and result.json", file=sys.stderr)


class _Tee(io.TextIOBase):
    """A stdout that writes to two streams."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, s: str) -> int:
        for stream in self.streams:
            stream.write(s)
        return len(s)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()
