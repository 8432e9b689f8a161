"""The one training loop of the theory models: record at chosen steps, update, report progress.

Scan&Snap's batched SGD (:func:`attnlab.theory.scansnap.train.train_sweep`), JoMA's full-batch
gradient descent (:func:`attnlab.theory.joma.model.train`) and the hierarchy transformer's Adam
(:func:`attnlab.theory.joma.transformer.train_classifier`) differ only in what one update is and
what is recorded; the schedule is this one.
"""
from __future__ import annotations

from typing import Callable, Iterable


def run_steps(
    steps: int,
    update: Callable[[int], None],
    record: Callable[[int], None] | None = None,
    record_at: Iterable[int] = (),
    on_step: Callable[[int], None] | None = None,
) -> None:
    """For t = 0..steps: ``record(t)`` if t is in ``record_at`` (the state after t updates); then,
    unless t == steps, ``update(t)`` (update number t + 1) and ``on_step(t + 1)`` (updates done)."""
    wanted = set(record_at)
    for t in range(steps + 1):
        if record is not None and t in wanted:
            record(t)
        if t == steps:
            break
        update(t)
        if on_step is not None:
            on_step(t + 1)
