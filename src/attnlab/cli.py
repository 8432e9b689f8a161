"""The ``attnlab`` command line: every capability's commands, found, not listed.

Each capability folder with commands has a ``cli`` module (``attnlab.kv.cli``, ...) holding
``GROUP`` (theory, experiments, training, inference or models) and ``add_commands(sub)``, which
adds its subparsers and sets ``func`` on each; ``main`` dispatches to ``args.func(args)``. A new
command is one function in its capability's ``cli`` module, nothing here.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys

import attnlab
from attnlab import __version__
from attnlab.core.errors import UsageError

# How `attnlab --help` groups the commands: heading -> the GROUPs under it, in this order.
HEADINGS = (
    ("theory and experiments", ("theory", "experiments")),
    ("training", ("training",)),
    ("inference", ("inference",)),
    ("models", ("models",)),
)

EPILOG = """examples:
  attnlab demo                                   # a few minutes on 2 CPU cores; prints where the report is
  attnlab list
  attnlab reproduce scansnap-fig6 --out runs/fig6
  attnlab stream --model smollm2 --method h2o:budget=256 --out runs/h2o

Every run folder holds config.json (the fully resolved config), metrics.json (each claim:
measured, expected, tolerance, status), PNG figures and report.md."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints usage too)
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def capability_clis() -> list[str]:
    """Every ``attnlab.<package>.cli`` module, by package name."""
    return [f"attnlab.{m.name}.cli" for m in pkgutil.iter_modules(attnlab.__path__)
            if m.ispkg and importlib.util.find_spec(f"attnlab.{m.name}.cli") is not None]


def add_all(sub) -> dict[str, list[str]]:
    """Add every capability's commands to ``sub``: GROUP -> command names, in the order added."""
    groups: dict[str, list[str]] = {}
    for name in capability_clis():
        module = importlib.import_module(name)
        before = set(sub.choices)
        module.add_commands(sub)
        groups.setdefault(module.GROUP, []).extend(n for n in sub.choices if n not in before)
    return groups


def _command_list(sub, groups: dict[str, list[str]]) -> str:
    """The commands under their headings, each with its one-line help."""
    helps = {a.dest: a.help or "" for a in sub._choices_actions}  # argparse keeps add_parser(help=) only here
    known = {g for _, gs in HEADINGS for g in gs}
    headings = list(HEADINGS) + [(g, (g,)) for g in groups if g not in known]
    width = max((len(n) for names in groups.values() for n in names), default=0) + 2
    lines = []
    for heading, gs in headings:
        names = [n for g in gs for n in groups.get(g, [])]
        if names:
            lines += [f"{heading} commands:"] + [f"  {n:{width}s}{helps.get(n, '')}" for n in names] + [""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="attnlab",
        description="attnlab: how self-attention trains (Scan&Snap, JoMA), made runnable, with each theorem\n"
        "checked as measured vs predicted, and the inference methods that exploit what it predicts.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, help=argparse.SUPPRESS)
    groups = add_all(sub)
    p.usage = "%(prog)s [-h] [--version] COMMAND ..."  # after add_subparsers: the commands' prog is "attnlab NAME"
    p.epilog = _command_list(sub, groups) + "\n" + EPILOG
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 0
        args.argv = argv  # the command that made a run, recorded in its report
        code = args.func(args)
        from attnlab.experiments.config import older_spellings

        for note in older_spellings():  # said once the command has done its work: a bad input stays one line
            print(note, file=sys.stderr)
        return code
    except UsageError as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # a run's folder is replaced only once it completes; train keeps what its last checkpoint saved
        print("attnlab: interrupted; --out holds what it held before (a train run: its last checkpoint, "
              "continued with --resume)", file=sys.stderr)
        return 130
