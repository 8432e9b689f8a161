"""Writing without ever leaving a half-written result: files and folders built aside, then renamed."""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

from attnlab.core.errors import UsageError

# The disk refusing a write: full, over quota, read-only, a file over the file system's limit. No bug, and
# the fix (free space, or write elsewhere) is the same wherever in a run the write was.
DISK_REFUSALS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                 errno.EROFS: "read-only file system", errno.EFBIG: "file too large for its file system"}


def disk_refusal(e: BaseException | None) -> OSError | None:
    """The OSError in ``e``'s chain (itself, its cause or its context) that is the disk refusing a write
    (:data:`DISK_REFUSALS`), else None: libraries often raise their own error while handling one. Rust
    extensions (safetensors, tokenizers) raise no OSError but end their message with "(os error N)"."""
    seen = set()
    while e is not None and id(e) not in seen:
        code = e.errno if isinstance(e, OSError) else _rust_os_error(str(e))
        if code in DISK_REFUSALS:
            return e if isinstance(e, OSError) else OSError(code, os.strerror(code))
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _rust_os_error(message: str) -> int | None:
    """N from Rust's std::io::Error text "... (os error N)", else None."""
    _, sep, tail = message.rpartition("(os error ")
    number = tail.partition(")")[0]
    return int(number) if sep and number.isdigit() else None


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null (a reader then sees 'not measured')."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_text(obj: Any) -> str:
    """Strict JSON (``allow_nan=False``; NaN/inf become null), indented, with a final newline."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False) + "\n"


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` beside ``path`` and rename it over ``path``: readers see the old or the new file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def refused_line(e: OSError, path: Path, flag: str = "--out") -> str:
    """One line for ``e``, raised writing ``path`` (the user's ``flag``): the disk's refusal (full, read-only:
    :data:`DISK_REFUSALS`) or the folder's (no permission), and the fix."""
    err = disk_refusal(e) or e
    cause = DISK_REFUSALS.get(err.errno) or (err.strerror or type(err).__name__).lower()
    fix = "free space there or choose another" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "choose another"
    return f"{flag} {path}: cannot write there ({cause}): {fix} {flag}"


def check_writable(path: Path, flag: str = "--out") -> None:
    """UsageError unless a file can be made beside ``path``: tried, not guessed (``os.access`` says yes to root
    and knows nothing of a read-only mount), so a command fails before its work, not after it."""
    probe = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise UsageError(refused_line(e, path, flag)) from None


def check_replaceable(path: Path, marker: bytes, what: str, force: bool = False, flag: str = "--out") -> None:
    """UsageError when ``path`` is a file that is not ``what`` (its first 64 KiB lack ``marker``), unless
    ``force``: a command replaces its own earlier output, never a file of the user's."""
    path = Path(path)
    if force or not path.is_file():
        return
    try:
        with path.open("rb") as f:
            ours = marker in f.read(1 << 16)
    except OSError:
        ours = False
    if not ours:
        raise UsageError(f"{flag} {path} exists and is not {what}: choose another {flag}, or add --force "
                         "to replace it")


def write_output(path: Path, data: str | bytes, flag: str = "--out") -> Path:
    """:func:`write_atomic` for a file the user named with ``flag``: a refused write (a full disk, a read-only
    or unwritable folder) is one line (a UsageError), and what was at ``path`` stays as it was."""
    try:
        return write_atomic(path, data)
    except OSError as e:
        kept = " (the file there is untouched)" if Path(path).exists() else ""
        raise UsageError(refused_line(e, path, flag) + kept) from None


def write_json(path: Path, obj: Any) -> Path:
    return write_atomic(path, json_text(obj))


def swap_into_place(build: Path, target: Path) -> None:
    """Rename the finished folder ``build`` to ``target``. An old ``target`` is moved aside first and
    removed last, so a kill between the two renames leaves it, complete, in a hidden ``.old-`` sibling;
    if the second rename fails the old folder is put back and the error raised."""
    build, target = Path(build), Path(target)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        target.replace(old)
    try:
        build.replace(target)
    except OSError:
        if old is not None:
            old.replace(target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: Path, name: str) -> list[Path]:
    """Remove ``.NAME.partial-PID-*`` / ``.NAME.old-PID-*`` siblings left by killed processes (PID gone)."""
    removed = []
    for p in Path(parent).glob(f".{name}.*-*"):
        kind, _, rest = p.name[len(name) + 2:].partition("-")
        pid = rest.split("-", 1)[0]
        if kind in ("partial", "old", "tmp") and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    return removed


class NotPlaced(OSError):
    """A finished folder could not replace its target; it is kept, complete, at ``kept``."""

    def __init__(self, target: Path, kept: Path, reason: str):
        super().__init__(f"{target}: the finished folder could not be moved into place ({reason}); it is in {kept}")
        self.target, self.kept, self.reason = target, kept, reason


def _place(stage: Path, target: Path) -> None:
    """Move the finished ``stage`` into ``target``; if that fails, keep it, visibly, and say where."""
    try:
        swap_into_place(stage, target)
    except OSError as e:
        kept = target.with_name(f"{target.name}.finished-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        try:  # a visible name: clean_stale removes only hidden staging folders
            stage.replace(kept)
        except OSError:
            kept = stage
        raise NotPlaced(target, kept, e.strerror or str(e)) from e


@contextlib.contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh hidden sibling folder of ``target`` (parent folders made as needed). When the block
    succeeds it replaces ``target`` whole; if that last rename fails, the finished folder is kept under a
    visible sibling name and :class:`NotPlaced` says where. When the block raises, the staging folder
    and the parent folders made for it are removed, and ``target`` is untouched."""
    target = Path(target)
    created = [p for p in target.parents if not p.exists()]  # innermost first
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(target.parent, target.name)
    stage = target.with_name(f".{target.name}.partial-{os.getpid()}-{time.monotonic_ns()}")
    stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        for p in created:  # only folders made here, and only if still empty
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    _place(stage, target)
