"""What the benchmarks say about the machine they ran on: the CPU as /proc names it, and the process's
memory (resident, peak resident, and resident after glibc's malloc_trim). One place, so every figure in
benchmarks/README.md names its machine and measures memory the same way; and one ``--out DIR``, so every
figure there comes from a committed file (``recorded``). Imported as ``host`` (the benchmarks run as
scripts, so their folder is on the path).

Also the one way a benchmark reads its command line (``parser``, and the ``type=`` checks below): every
number in its range (NaN and infinity never), names with attnlab's did-you-mean, texts and folders that
exist, and the tools it needs (``need_tool``), each wrong one a single line and exit code 2 before any work,
not a traceback minutes in."""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import importlib.util
import io
import json
import math
import os
import resource
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from attnlab.core.errors import UsageError, first_line, within
from attnlab.core.io import write_atomic
from attnlab.core.machine import machine  # the benchmarks name their machine as host.machine()
from attnlab.core.registry import Registry


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


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit code 2, as attnlab's own (no usage block before them)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parser(doc: str | None = None, **kw) -> OneLineParser:
    """The parser of every benchmark: ``doc`` (its docstring) as the help, its errors one line."""
    return OneLineParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def number(kind: type = int, bound: str = ">= 1") -> Callable[[str], Any]:
    """type=: a number of ``kind`` (int or float) in ``bound`` (as attnlab's configs write one: ">= 1", "> 0",
    "[0, 1]"; :func:`attnlab.core.errors.within`), finite."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (math.isfinite(value) and within(value, bound)):
            raise argparse.ArgumentTypeError(f"{text!r}: give {noun} {'in ' * (bound[0] in '[(')}{bound}")
        return value

    return parse


def numbers(kind: type = int, bound: str = ">= 1") -> Callable[[str], tuple]:
    """type=: comma-separated numbers, each as :func:`number` takes it (``--chunks 8,1``) -> a tuple."""
    one = number(kind, bound)

    def parse(text: str) -> tuple:
        try:
            return tuple(one(t.strip()) for t in text.split(","))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: comma-separated, each {str(e).split(': give ')[1]}, "
                                             "e.g. 8,1") from None

    return parse


positive_int, natural, positive_ints = number(int, ">= 1"), number(int, ">= 0"), numbers(int, ">= 1")
positive, fraction = number(float, "> 0"), number(float, "[0, 1]")


def kv_budget(*policies: str, n_sink: int = 4) -> Callable[[str], int]:
    """type=: a KV budget in tokens that each of ``policies`` can hold (attnlab's own check: room beyond the
    sinks)."""
    def parse(text: str) -> int:
        from attnlab.kv.policies import make_policy

        budget = positive_int(text)
        for name in policies:
            try:
                make_policy(name, budget=budget, n_sink=n_sink)
            except UsageError as e:
                raise argparse.ArgumentTypeError(f"{name}: {first_line(e)}") from None
        return budget

    return parse


def one_of(known, what: str, many: bool = False) -> Callable[[str], Any]:
    """type=: a name in ``known`` -- a Registry, names, or a function giving either (called when a value is
    checked: a registry that imports PyTorch is loaded then) -- else attnlab's did-you-mean. ``many``:
    comma-separated names -> a tuple."""
    def parse(text: str):
        names = known() if callable(known) else known
        if not isinstance(names, Registry):  # a plain list gets the registries' one did-you-mean too
            listed, names = names, Registry(what)
            for name in listed:
                names.add(name, name)
        chosen = tuple(t.strip() for t in text.split(",")) if many else (text,)
        for name in chosen:
            if name not in names:
                raise argparse.ArgumentTypeError(names.unknown(name))
        return chosen if many else text

    return parse


def corpus(flag: str = "--text") -> Callable[[str], str]:
    """type=: a text attnlab finds (a path, a data-folder name, a shipped text, ``PATH:ENCODING``; an ``hf:``
    name is left to the run), found before any work."""
    def parse(text: str) -> str:
        from attnlab.data.sources import HUB_PREFIX, locate

        if not text.startswith(HUB_PREFIX):
            try:
                locate(text, flag.lstrip("-"), f"{flag} PATH")
            except UsageError as e:
                raise argparse.ArgumentTypeError(first_line(e)) from None
        return text

    return parse


def model_name(text: str) -> str:
    """type=: a model attnlab can load -- an alias (fetched, if need be, only when the run loads it), a model
    or train-run folder, a hub id -- else attnlab's one line (an unknown alias: did you mean)."""
    from attnlab.models.pretrained import KNOWN, resolve_model

    if text not in KNOWN:
        try:
            resolve_model(text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(first_line(e)) from None
    return text


def existing_folder(text: str) -> Path:
    """type=: a folder that exists."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder" + (" (a file)" if Path(text).exists() else ""))
    return Path(text)


def device(text: str) -> str:
    """type=: cpu, or cuda where PyTorch sees a CUDA device (attnlab's own check)."""
    from attnlab.experiments.runner import check_device

    try:
        return check_device(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[-1]) from None


def need_tool(ap: argparse.ArgumentParser, name: str, fix: str, module: bool = False) -> None:
    """One line and exit code 2 (``ap.error``) unless ``name`` is here -- a program on PATH, or with
    ``module`` an importable Python module -- so a benchmark lacking it stops before its work, not after."""
    found = importlib.util.find_spec(name) if module else shutil.which(name)
    if found is None:
        ap.error(f"{name} is not {'installed' if module else 'on PATH'}: {fix}")


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
