"""A measuring command is a registered experiment: its flags are built from the experiment's config.

Each field of the config dataclass becomes one flag, ``--field-name``, whose help is the field's
``option(...)`` metadata; parsed flags go back into the config **by name**, through the same parser as
``--set`` (so ``attnlab stream --budget 0.2`` and ``attnlab reproduce stream --set budget=0.2`` and a
sweep's ``--grid budget=...`` cannot disagree). The command then runs the experiment through the runner
like ``attnlab reproduce``. Nothing here imports PyTorch: every command's parser builds without it.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any, Callable

from attnlab.experiments import config as config_mod


def option(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
           repeat: bool = False, choices: Callable[[], list[str]] | None = None, bounds: str | None = None,
           allow_nonfinite: bool = False, separator: str | None = None, required: bool = False) -> Any:
    """A config field with its command-line help: ``tokens: int = option(2048, "stream length", bounds=">= 2")``.

    ``flag`` renames the flag (default ``--field-name``); ``repeat`` makes it a repeatable flag whose
    values form the tuple (for values that hold commas themselves); ``choices`` names a registry's
    names, listed in ``--help`` only when help is printed (a registry may import PyTorch). ``bounds``: the
    range of a number (each of a tuple's), as :func:`attnlab.core.errors.within` reads it, checked with the
    flag, ``--set`` and every ``--grid`` cell alike. NaN and infinity are refused in every field unless
    ``allow_nonfinite`` (a field where ``inf`` means "no limit", say). ``separator``: what ``--set`` splits a
    tuple's items at (default ","; ";" for items that hold commas, as ``methods`` do). ``required``: the command
    refuses to start without the flag (the default only fills the config a ``--set`` or test builds)."""
    meta = {"help": help, "flag": flag, "metavar": metavar, "repeat": repeat, "choices": choices, "bounds": bounds,
            "allow_nonfinite": allow_nonfinite, "separator": separator, "required": required}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Alias:
    """Older flags that together spell one method (``--policy h2o --budget 0.2`` for ``--method h2o:budget=0.2``,
    ``--quant int8`` for ``--method int8``): a config lists its own in ``ALIASES: ClassVar`` (a tuple). ``flags``:
    each key's (help, metavar, registry choices or None); ``--KEY`` and ``--set KEY=`` are read together as the
    method ``spec(given, explicit, spelled)`` returns from the keys given (their texts) unless ``explicit`` (the
    ``--method`` specs) has one of its kind ("" for none; a bad value refused as ``spelled(key, text)`` names
    it), and a line on stderr says the new spelling."""

    spec: Callable[[dict[str, str], tuple[str, ...], Callable[[str, str], str]], str]
    flags: dict[str, tuple[str, str, Callable[[], list[str]] | None]]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Fills a flag's registry choices in when help is printed, not when the parser is built."""

    def _get_help_string(self, action):
        text = super()._get_help_string(action) or ""
        choices = getattr(action, "registry_choices", None)
        return text.replace("{choices}", ", ".join(choices())) if choices else text


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, config_cls: type,
                     skip: tuple[str, ...] = ()) -> None:
    """One flag per field of ``config_cls`` (``skip`` aside: a command that groups its flags in the help adds
    each group with the others skipped); every flag defaults to "not given" so that the config's own default
    applies, which the help states."""
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        if f.name in skip:
            continue
        meta, default = f.metadata, f.default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        text = meta.get("help", "") + ("" if default in ((), "", None) else f" (default {shown})")
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": text, "required": meta.get("required", False)}
        if hints[f.name] is bool:  # a switch: the flag turns the default around
            flag = _flag(f) if not default else "--no-" + f.name.replace("_", "-")
            kw.update(action="store_const", const=str(not default), help=meta.get("help", ""))
        else:
            flag = _flag(f)
            kw.update(metavar=meta.get("metavar") or f.name.upper())
            if meta.get("repeat"):
                kw["action"] = "append"
        action = parser.add_argument(flag, **kw)
        action.registry_choices = meta.get("choices")
    for alias in getattr(config_cls, "ALIASES", ()):
        for name, (text, metavar, choices) in alias.flags.items():
            action = parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None, metavar=metavar,
                                         help=text + " (an older spelling of --method: it goes in the next release)")
            action.registry_choices = choices


def config_from_args(config_cls: type, args: argparse.Namespace) -> Any:
    """The config for parsed ``args``: each given flag by its field's name, parsed as ``--set`` parses."""
    overrides: dict[str, str] = {}
    base: dict[str, Any] = {}
    for f in dataclasses.fields(config_cls):
        value = getattr(args, f.name, None)
        if isinstance(value, list):  # a repeatable flag: its values are the tuple, each whole
            base[f.name] = tuple(value)
        elif value is not None:
            overrides[f.name] = value
    older = [name for alias in getattr(config_cls, "ALIASES", ()) for name in alias.flags]
    overrides |= {name: getattr(args, name) for name in older if getattr(args, name, None) is not None}
    flags = {f.name: _flag(f) for f in dataclasses.fields(config_cls)} | {n: "--" + n.replace("_", "-") for n in older}
    return config_mod.resolve(config_cls, overrides, base, lambda key, text: f"{flags[key]} {text}")


def add_experiment_command(sub, name: str, config_cls: type, help: str, description: str, epilog: str = "",
                           skip: tuple[str, ...] = (),
                           formatter_class: type = HelpFormatter) -> argparse.ArgumentParser:
    """``attnlab NAME``: the registered experiment ``name`` with its config's fields as flags, plus
    ``--out`` and ``--device`` (``formatter_class``: a :class:`HelpFormatter` that adds to the help)."""
    p = sub.add_parser(name, help=help, description=description, epilog=epilog, formatter_class=formatter_class)
    add_config_flags(p, config_cls, skip)
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--out", required=True, type=Path, help="output folder (config.json, metrics.json, report.md, "
                   "figures); a previous run of this command there is replaced once the new one has completed")
    p.set_defaults(func=run_command, experiment=name)
    return p


def run_command(args) -> int:
    """Run the command's experiment into ``--out``; print its summary lines and where the files are."""
    from attnlab.experiments import registry, runner

    exp = registry.get(args.experiment)
    cfg = config_from_args(exp.config_cls, args)
    result = runner.run_into(exp, cfg, args.out, runner.check_device(args.device), runner.command_line(args.argv))
    for line in result.summary.splitlines():
        print(line.removeprefix("- "))
    files = ["metrics.json", *result.figures, "report.md"]
    print("results: " + ", ".join(f"{args.out}/{f}" for f in files), file=sys.stderr)
    return 0
