"""The probe contract: a probe names the hook points it reads, sees each streamed chunk's tensors at
those points, and reports metrics, claims and figures. ``PROBES`` holds the probe classes by name.

A probe never holds a whole attention map or activation of the text: it folds each chunk into running
sums, counts or top-k lists (see ``attnlab.probes.stream``), so a 16k-token text costs what one chunk
costs plus what the probe keeps per token (e.g. one float per key for accumulated attention).
"""
from __future__ import annotations

from typing import Any, ClassVar, Iterable

import torch
from torch import nn

from attnlab.core.errors import check_number, within  # noqa: F401 -- within: the bounds' reader, here as before
from attnlab.core.registry import Registry


class Probe:
    """Base class. Subclasses set ``name`` (the registry name), ``needs`` (hook-point names or globs from
    ``attnlab.models.trace``, e.g. ``("blocks.*.attn.pattern",)``) and ``summary`` (one line for --help),
    and implement ``see`` and ``result``; ``claims`` and ``figures`` where a paper makes a claim or a
    figure says it better than a table."""

    name: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    # True: reads activations only and wants a long corpus, so it streams in independent windows
    # (``stream(..., window=W)``: linear time, constant memory) rather than the cached stream
    windowed: ClassVar[bool] = False
    # Whether its claims decide on a short text (a quick run's few hundred tokens): properties of the weights, or
    # margins far beyond what a short text moves. Else a quick run reports them unresolved.
    decides_on_short_texts: ClassVar[bool] = False
    # Each numeric constructor parameter -> its range, checked when the probe is built (:func:`check_bounds`)
    # and so before any model is loaded: ">= 1", "> 0", "[0, 1]", "(0, 1)", "(0, 1]". A tuple's every
    # element is checked; None, where a parameter allows it, passes.
    bounds: ClassVar[dict[str, str]] = {}

    def attach(self, model: nn.Module, ids: torch.Tensor) -> None:
        """Called once before the first chunk with the model and the whole text's ids (T,): read dims,
        size accumulators. Default: nothing."""

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        """One chunk's tensor ``t`` at hook ``name`` (shapes as in ``attnlab.models.trace``; a pattern is
        (1, H, t, S) with S = start + t); ``start``: the absolute position of the chunk's first token.
        Read ``t`` now: it is not a copy and is gone after the call."""
        raise NotImplementedError

    def result(self) -> dict:
        """The probe's measurements, JSON-able (lists, not tensors)."""
        raise NotImplementedError

    def claims(self, metrics: dict) -> list:
        """Claims (``attnlab.experiments.claims``) judged on ``metrics``: none unless a paper makes one."""
        return []

    def figures(self, metrics: dict, ctx) -> dict[str, str]:
        """Save figures with ``ctx.savefig(fig, file)``; return {file: caption}. Default: none."""
        return {}


def check_bounds(probe: Probe, args: dict[str, Any]) -> None:
    """UsageError naming the first constructor argument outside its probe's ``bounds`` (``args``: the
    constructor's ``locals()``), e.g. "heavy-hitters: heavy=0: need heavy >= 1"; and one that is NaN or
    infinite, bounded or not (:func:`attnlab.core.errors.check_number`, the check every option goes through)."""
    bounds = type(probe).bounds
    for key, value in args.items():
        if key != "self" and not (key.startswith("__") or key in ("args", "kwargs")):
            check_number(key, value, bounds.get(key), where=f"{probe.name}: {key}={_shown(value)}")


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def layer_of(name: str) -> int:
    """The layer index of a hook name: 'blocks.3.resid_post' -> 3."""
    return int(name.split(".")[1])


PROBES: Registry[type[Probe]] = Registry("probe", hint="see `attnlab probe --help` for the list")


def register(cls: type[Probe]) -> type[Probe]:
    """Class decorator: add a probe class to ``PROBES`` under its ``name``."""
    return PROBES.add(cls.name, cls)


def make_probes(names: Iterable[str], **options) -> list[Probe]:
    """The named probes, each built with the ``options`` its constructor accepts (did-you-mean on a typo)."""
    import inspect

    out = []
    for name in names:
        cls = PROBES.get(name)
        accepted = inspect.signature(cls).parameters
        out.append(cls(**{k: v for k, v in options.items() if k in accepted}))
    return out
