"""Resolve an experiment config from its dataclass defaults and ``--set key=value`` overrides.

Keys are field names; a nested dataclass field is reached with a dot (``data.T=64``,
``sgd.momentum=0``). Values are parsed by the field's type; tuples take commas
(``eta_z=0.5,1,2``). Unknown keys get a "did you mean" hint.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Callable

from attnlab.core.errors import UsageError, check_number, first_line


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """{"data.T": 128, ...} for a (nested) dataclass instance."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            out.update(flatten(v, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = v
    return out


def to_json(cfg: Any) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _parse(text: str, typ: Any, where: str, sep: str = ",") -> Any:
    """``text`` read as ``typ``; ``where`` is how the user wrote it ("--set key=text", "--flag text"); ``sep``
    separates a tuple's items (``;`` for items that hold commas themselves, as methods do)."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):  # int | float, int | None: the first type that reads it
        options = typing.get_args(typ)
        if type(None) in options and text.lower() == "none":
            return None
        for option in (t for t in options if t is not type(None)):
            try:
                return _parse(text, option, where, sep)
            except UsageError:
                pass
        names = " or ".join("none" if t is type(None) else getattr(t, "__name__", str(t)) for t in options)
        raise UsageError(f"{where}: expected a value of type {names}")
    try:
        if origin is tuple:
            (elem, *_rest) = typing.get_args(typ)
            return tuple(_parse(t.strip(), elem, where) for t in text.split(sep) if t.strip())
        if typ is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(text)
        if typ is float:
            return float(text)
        return text
    except ValueError:
        name = getattr(typ, "__name__", str(typ))
        raise UsageError(f"{where}: expected a value of type {name}") from None


def did_you_mean(key: str, keys) -> str:
    """``"did you mean 'x'? "`` for the closest config key, or nothing (--set and --grid say it alike)."""
    close = difflib.get_close_matches(key, list(keys), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def set_flag(key: str, text: str) -> str:
    return f"--set {key}={text}"


def resolve(config_cls: type, overrides: dict[str, str] | None = None, base: dict[str, Any] | None = None,
            spelled: Callable[[str, str], str] = set_flag) -> Any:
    """Instantiate ``config_cls`` with ``base`` (already-typed values, e.g. demo's quick mode)
    then ``overrides`` (strings from the command line) applied on top; ``spelled(key, text)`` is how an
    error names a value the user gave (``--set key=text`` unless a command's own flag gave it)."""
    default = config_cls()
    flat = flatten(default)
    hints, metas = field_types(config_cls), field_metadata(config_cls)
    values: dict[str, Any] = dict(base or {})
    wheres: dict[str, str] = {}
    notes: list[str] = []  # kept once the config is built (a bad value is refused without them)
    overrides = _older_spellings(config_cls, default, dict(overrides or {}), values, spelled, notes)
    for key, text in overrides.items():
        if key not in flat:
            raise UsageError(f"unknown config key {key!r}: {did_you_mean(key, flat)}keys are: {', '.join(flat)}")
        wheres[key] = spelled(key, text)
        values[key] = _parse(text, hints[key], wheres[key], metas.get(key, {}).get("separator") or ",")
    for key, value in values.items():  # before the config is built: its own checks may not survive a NaN
        check_field(key, value, metas.get(key, {}), wheres.get(key))
    try:
        cfg = _build(config_cls, values)
        _NOTES.extend(notes)
        return cfg
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 -- a config's own check that crashed on a value it did not foresee
        given = ", ".join(wheres.values()) or ", ".join(f"{k}={v}" for k, v in values.items()) or "its defaults"
        raise UsageError(f"{given}: not a setting {config_cls.__name__} can run ({type(e).__name__}: "
                         f"{first_line(e)}); change the value") from None


def check_field(key: str, value: Any, meta: Any, where: str | None = None) -> None:
    """The one check of a config value, whichever way it came (a flag, ``--set``, a ``--grid`` cell, a quick
    run's settings): no NaN or infinity unless the field's ``option`` allows them, and within its ``bounds``."""
    check_number(key, value, meta.get("bounds"), finite=not meta.get("allow_nonfinite"), where=where)


def check_fields(cfg: Any) -> None:
    """:func:`check_field` on each field of a config built in code (a ``__post_init__`` calls it), as
    :func:`resolve` checks those given on the command line."""
    for f in dataclasses.fields(cfg):
        check_field(f.name, getattr(cfg, f.name), f.metadata)


def field_types(cls: type, prefix: str = "") -> dict[str, Any]:
    """{"data.T": its type, ...} for a (nested) config class's fields (class variables are no keys)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for name in (f.name for f in dataclasses.fields(cls)):
        typ = hints[name]
        if dataclasses.is_dataclass(typ):
            out.update(field_types(typ, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = typ
    return out


def alias_keys(cls: type) -> dict[str, Any]:
    """The older per-method keys a config still reads (its ``ALIASES``: ``policy``, ``quant``, ...), each a text."""
    return {k: str for alias in getattr(cls, "ALIASES", ()) for k in alias.flags}


def field_metadata(cls: type, prefix: str = "") -> dict[str, Any]:
    """{"data.T": the field's metadata (its ``option``'s help, bounds, ...), ...} for a (nested) config class."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(field_metadata(hints[f.name], f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = f.metadata
    return out


_NOTES: list[str] = []  # the older spellings this process resolved, each once (attnlab.cli says them at the end)


def older_spellings() -> list[str]:
    """The notes on older flags resolved since the last call (each said once), emptied."""
    out = list(dict.fromkeys(_NOTES))
    _NOTES.clear()
    return out


def _older_spellings(config_cls: type, default: Any, overrides: dict[str, str], values: dict[str, Any],
                     spelled: Callable[[str, str], str], notes: list[str]) -> dict[str, str]:
    """``overrides`` with the config's older per-method keys (its ``ALIASES``: ``quant`` for ``--quant``, say)
    turned into the ``methods`` entries they spell; ``notes`` gets the new spelling of each."""
    specs = []
    explicit = (tuple(s for s in overrides["methods"].split(";") if s.strip()) if "methods" in overrides else
                tuple(values.get("methods", getattr(default, "methods", ()))))
    for alias in getattr(config_cls, "ALIASES", ()):
        given = {k: overrides.pop(k) for k in alias.flags if k in overrides}
        spec = alias.spec(given, explicit, spelled) if given else ""
        if spec:
            specs.append(spec)
            older = " ".join(spelled(k, text) for k, text in given.items())
            notes.append(f"attnlab: {older} is --method {spec} now (the older spelling goes in the next release)")
    if specs:
        if "methods" in overrides:
            overrides["methods"] = ";".join([overrides["methods"], *specs])
        else:
            values["methods"] = explicit + tuple(specs)
    return overrides


def _build(cls: type, values: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            sub = {k[len(f.name) + 1 :]: v for k, v in values.items() if k.startswith(f.name + ".")}
            if sub:
                kwargs[f.name] = _build(typ, {**_present(cls, f.name), **sub})
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def _present(cls: type, name: str) -> dict[str, Any]:
    """The default value of nested dataclass field ``name``, flattened (so overrides keep
    the experiment's own defaults for that sub-config, not the sub-config class's)."""
    return flatten(getattr(cls(), name))


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` strings (reproduce, sweep) -> {key: value text}; one line for a malformed one."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write KEY=VALUE, e.g. --set sgd.steps=50")
        out[key.strip()] = value.strip()
    return out
