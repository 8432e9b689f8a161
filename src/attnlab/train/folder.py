"""The folder of an ``attnlab train`` run: what may be written where, what --resume needs, and what a
failed start takes back.

A train run writes into its folder as it goes (checkpoint.pt every ``--checkpoint-every`` steps), not
into a staging folder, so that a stopped run can be resumed. A start writes config.json (its settings,
"command": "train"), tokenizer/ and metrics.jsonl before its first checkpoint: a folder holding only
those has nothing to resume and nothing a new start would lose, so the same command starts it again
(with or without --resume); a start that fails (a full disk, Ctrl-C) removes them itself.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from attnlab.core.errors import UsageError

START = ("config.json", "tokenizer", "metrics.jsonl")  # what a start writes before its first checkpoint
RESUME_FREE = ("steps", "resume", "device", "out")  # may differ when a run is resumed or extended


def _of_a_start(p: Path) -> bool:
    """What a start writes before its first checkpoint, or a temporary file of a write a kill interrupted."""
    return p.name in START or (p.name.startswith(".") and ".tmp-" in p.name)


def unfinished_start(out: Path) -> bool:
    """``out`` holds only what a start writes before its first checkpoint: a start that stopped there, with
    nothing to resume and nothing a new start would lose."""
    return not (out / "checkpoint.pt").exists() and all(_of_a_start(p) for p in out.iterdir())


def check_out(out: Path, resume: bool) -> bool:
    """--out names a folder this process can write into (or create), holding nothing a run would lose, and
    fits --resume; checked before any text is read or any tokenizer built, and without creating anything.
    -> whether the run continues from a checkpoint (False: it starts from step 0)."""
    from attnlab.experiments import runner  # here: `attnlab --help` need not import the experiments

    runner.check_out(out.expanduser().absolute(), "train")  # a file, a user's files, another experiment's run
    if (out / "checkpoint.pt").is_file():
        if not resume:
            raise UsageError(f"--out {out} already holds a run: add --resume to continue it, or pick another folder")
    elif out.is_dir() and any(out.iterdir()) and not unfinished_start(out):
        kept = ", ".join(sorted(p.name + "/" * p.is_dir() for p in out.iterdir() if p.name not in START))
        raise UsageError(f"--out {out} holds a train run with no checkpoint.pt to resume (its {kept} would be "
                         "lost): choose another folder")
    elif resume and not (out / "config.json").is_file():
        raise UsageError(f"--resume: {out} holds no run; start without --resume")
    base = out.expanduser().absolute()
    while not base.exists():  # the nearest existing folder: where mkdir will start
        base = base.parent
    if not base.is_dir():
        raise UsageError(f"--out {out}: {base} is a file, so no folder can be made under it; give another path")
    try:
        with tempfile.TemporaryFile(dir=base):  # a real write: permission bits say nothing to root or read-only mounts
            pass
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write in {base} ({e.strerror or e}); give a folder you can write to") \
            from None
    return resume and (out / "checkpoint.pt").is_file()


def remove_start(out: Path, made: list[Path]) -> None:
    """Undo a start that failed before its first checkpoint: what it wrote, and the folders made for it."""
    for p in out.iterdir() if out.is_dir() else ():
        if _of_a_start(p):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for folder in made:  # innermost first, and only if nothing else was put there meanwhile
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _spelled(value):
    """A setting as its flag spells it: a list (config.json) or tuple as its comma-joined items, so that a run
    started when --snapshot-steps was one text ("100,200") resumes under the tuple it is now."""
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def check_resume(out: Path, settings: dict) -> None:
    """A resumed run must use the settings it was started with (all but RESUME_FREE)."""
    try:
        saved = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"--resume: {out}/config.json is missing or unreadable; start a new run folder") from None
    diff = [f"--{k.replace('_', '-')} {saved.get(k)!r} then, {v!r} now" for k, v in settings.items()
            if k not in RESUME_FREE and _spelled(saved.get(k)) != _spelled(v)]
    if diff:
        raise UsageError(f"--resume: {out} was written by a different config ({'; '.join(diff)}); resume with "
                         "the same settings or start a new run folder")
