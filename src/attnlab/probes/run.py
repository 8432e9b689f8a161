"""Probes as a library: find them, choose them, parse their options, stream a model with them.

What ``attnlab probe``, the ``probes`` experiment and benchmarks/bench_probes.py share. Probe modules
are found, not listed: every module of ``attnlab.probes`` that is neither machinery (:data:`MACHINERY`)
nor an experiment (``experiments``, ``exp_*``) is imported, and registers its probe class with ``@register``.

A probe's options are its constructor's parameters: ``--option key=value`` is parsed by the parameter's
annotation exactly as ``--set`` parses a config field (int, float, tuple[int, ...], X | None), and the
probe's constructor checks its ``bounds`` (:func:`attnlab.probes.base.check_bounds`), so a bad option is
one line before any model is loaded.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import types
import typing

import torch
from torch import nn

from attnlab.core.errors import UsageError, first_line
from attnlab.experiments import config as config_mod
from attnlab.experiments.claims import undecided
from attnlab.probes.base import PROBES, Probe, make_probes

MACHINERY = ("base", "stream", "run", "plots", "configs", "cli")  # modules of the package that hold no probe
# The order probes are listed, run and reported in: the (attention first, then activations, then
# geometry); a module not named here still loads, after these, by name.
ORDER = ("sinks", "heavy", "massive", "scansnap", "superposition", "geometry")


def probe_modules() -> list[str]:
    """The modules of ``attnlab.probes`` that hold probes: all but the machinery and the experiments."""
    import attnlab.probes as package

    names = [info.name for info in pkgutil.iter_modules(package.__path__, "attnlab.probes.")]
    last = [n.rsplit(".", 1)[-1] for n in names]
    return [n for n, m in zip(names, last) if m not in MACHINERY and m != "experiments" and not m.startswith("exp_")]


def load_probes() -> list[str]:
    """Import every probe module of ``attnlab.probes`` (registering its probes); the registered names."""
    for module in probe_modules():
        importlib.import_module(module)

    def key(name: str) -> tuple:  # by module (ORDER, then by name); in a module, registration order (stable sort)
        module = PROBES.get(name).__module__.rsplit(".", 1)[-1]
        return (ORDER.index(module) if module in ORDER else len(ORDER), module)

    return sorted(PROBES.names(), key=key)


def chosen(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` checked against the registry (did you mean), or every registered probe for ()."""
    known = load_probes()
    for name in names:
        PROBES.get(name)
    return tuple(names) or tuple(known)


def _settable(typ) -> bool:
    """Whether ``--option`` can write a value of type ``typ`` (not, e.g., a callable)."""
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        return all(t is type(None) or _settable(t) for t in typing.get_args(typ))
    return typing.get_origin(typ) is tuple or typ in (int, float, bool, str)


def option_types(names: tuple[str, ...]) -> dict[str, type]:
    """The options of the named probes: each constructor parameter ``--option`` can set -> its annotation."""
    out: dict[str, type] = {}
    for name in names:
        cls = PROBES.get(name)
        hints = typing.get_type_hints(cls.__init__)
        for p in inspect.signature(cls).parameters.values():
            if p.name in hints and _settable(hints[p.name]):
                out.setdefault(p.name, hints[p.name])
    return out


def probe_options(texts: tuple[str, ...], names: tuple[str, ...]) -> dict:
    """``--option key=value`` strings -> {key: typed value}; UsageError for a malformed one, a key that no
    chosen probe's constructor takes (naming the keys they do take) or a value its annotation cannot read."""
    takes = option_types(names)
    given: dict[str, str] = {}
    for text in texts:
        key, sep, value = (s.strip() for s in text.partition("="))
        if not sep or not key:
            raise UsageError(f"--option {text!r}: give key=value, e.g. --option layers=7,14,22")
        if key not in takes:
            raise UsageError(f"--option {key}: no chosen probe ({', '.join(names)}) takes it; they take "
                             f"{', '.join(sorted(takes))}")
        given[key] = value
    # the options, as a config whose fields are the constructors' parameters: read as --set reads a field
    fields = [(k, t, dataclasses.field(default=None)) for k, t in takes.items()]
    parsed = config_mod.resolve(dataclasses.make_dataclass("ProbeOptions", fields, frozen=True), given,
                                spelled=lambda key, text: f"--option {key}={text}")
    return {k: getattr(parsed, k) for k in given}


def check_readable(model: nn.Module, probes: list[Probe]) -> None:
    """UsageError naming the implementation tried when a probe needs attention patterns and the model
    cannot switch to eager attention (the only one that materialises them); the model is left as it was."""
    if not any(n.endswith("attn.pattern") for p in probes for n in p.needs):
        return
    impl = model.config._attn_implementation
    try:
        model.set_attn_implementation("eager")
    except Exception as e:  # transformers raises ValueError, ImportError or its own errors here
        raise UsageError(f"cannot read this model's attention patterns: switching its {impl!r} attention to "
                         f"'eager' failed ({first_line(e)}); use a model whose attention runs eagerly") from None
    model.set_attn_implementation(impl)


def run_probes(model: nn.Module, ids: torch.Tensor, names: tuple[str, ...], chunk: int, ctx, decode=None,
               corpus: torch.Tensor | None = None, window: int = 512, options: dict | None = None,
               short: str | None = None):
    """Stream ``ids`` (T,) once through ``model`` with the named probes, and ``corpus`` (default ``ids``) in
    independent windows of ``window`` tokens with the windowed ones (superposition): (probe name -> its
    metrics, the probes' claims, {figure file: caption}). ``decode``: ids -> text, for the probes' examples;
    ``options``: keyword options for the probes' constructors (each probe takes those it accepts); ``short``:
    why this text is too short for the claims of probes that do not decide on short texts (they are then
    unresolved, with that note)."""
    from attnlab.probes.stream import stream

    probes = make_probes(names, decode=decode, **(options or {}))
    check_readable(model, probes)
    cached = [p for p in probes if not p.windowed]
    windowed = [p for p in probes if p.windowed]
    if cached:
        with ctx.progress(ids.numel(), "probes") as bar:
            stream(model, ids, cached, chunk, bar)
    if windowed:
        corpus = ids if corpus is None else corpus
        with ctx.progress(corpus.numel(), f"{', '.join(p.name for p in windowed)} (windows of {window})") as bar:
            stream(model, corpus, windowed, chunk, bar, window=window)
    metrics, claims, figures = {}, [], {}
    for p in probes:
        metrics[p.name] = m = p.result()
        claims += [c if short is None or p.decides_on_short_texts else undecided(c, short) for c in p.claims(m)]
        figures.update(p.figures(m, ctx))
    return metrics, claims, figures


def claim_lines(claims) -> list[str]:
    """One line per claim: status, what it says, the measured value."""
    return [f"[{c.status}] {c.claim}: {c.measured:.4g}" for c in claims]
