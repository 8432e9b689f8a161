"""``attnlab list``, ``attnlab reproduce`` and ``attnlab demo``: the registered experiments, one
run of one of them, and all of them as a demo."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from attnlab.core.cache import OFFLINE_HELP, go_offline
from attnlab.core.errors import UsageError

GROUP = "experiments"

EPILOG = """examples:
  attnlab list
  attnlab reproduce scansnap-fig6 --out runs/fig6
  attnlab reproduce scansnap-fig6 --out runs/fig6-quick --seeds 3 --set num_last=1,3 --set sgd.steps=50
  attnlab reproduce scansnap-theorems --out runs/thm --set ratios=10,30,100
  attnlab reproduce streaming-ppl --out runs/stream --quick

Every run folder holds config.json (the fully resolved config), metrics.json (each claim:
measured, expected, tolerance, status: holds, fails, unresolved, erratum or finding; a claim
with an interval carries it and its n), PNG figures and report.md."""


def add_commands(sub) -> None:
    from attnlab.experiments.demo import add_demo

    add_demo(sub)
    ls = sub.add_parser("list", help="the experiments, by part of the talk, in its order",
                        description="The registered experiments, grouped by the part of the talk they belong to "
                        "(Scan&Snap, JoMA, real text, KV-cache policies, RoPE scaling, later capabilities), in "
                        "the talk's order. Run one with `attnlab reproduce NAME --out DIR`.")
    ls.set_defaults(func=cmd_list)
    rep = sub.add_parser(
        "reproduce",
        help="run one experiment (a paper figure or theorem check) into a folder",
        description="Run one registered experiment. Writes DIR/config.json, DIR/metrics.json "
        "(claims: measured, expected, tolerance, status, and an interval with its n where a claim has one: "
        "it decides holds, fails or unresolved), PNG figures and DIR/report.md. A previous "
        "run in DIR is replaced only once the new one has completed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rep.add_argument("name", nargs="?", help="experiment name (see `attnlab list`)")
    rep.add_argument("--list", action="store_true", help="list the experiments, one line each")
    rep.add_argument("--out", type=Path, help="output folder (required to run)")
    rep.add_argument("--seeds", type=int, help="number of seeds, 1..N (experiments with a 'seeds' setting)")
    rep.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    rep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set sgd.steps=50 --set eta_z=1,2 (repeatable)")
    rep.add_argument("--method", dest="methods", action="append", default=[], metavar="NAME[:KEY=VALUE,...]",
                     help="a method the experiment's model runs under, repeatable (experiments that take a model; "
                     "`attnlab methods` lists them): --set methods=\"a;b\" spelled as flags")
    rep.add_argument("--quick", action="store_true", help="use the experiment's quick settings (as the demo does)")
    rep.add_argument("--offline", action="store_true", help=OFFLINE_HELP)
    rep.set_defaults(func=cmd_reproduce)


def cmd_list(args) -> int:
    from attnlab.experiments import registry

    part = None
    for exp in registry.load_all().values():
        if exp.part != part:
            print(("\n" if part is not None else "") + exp.part)
            part = exp.part
        print(f"  {exp.name:22s} {exp.summary}")
    return 0


def _takes_methods(exp) -> bool:
    return "methods" in {f.name for f in dataclasses.fields(exp.config_cls)}


def reproduce_config(exp, args):
    """The config ``attnlab reproduce`` runs ``exp`` with: its ``--set`` values, ``--method`` flags (experiments that
    take a model), ``--seeds`` and ``--quick``."""
    from attnlab.experiments import registry, runner
    from attnlab.experiments.config import parse_overrides

    if args.methods and not _takes_methods(exp):
        takes = ", ".join(e.name for e in registry.load_all().values() if _takes_methods(e))
        raise UsageError(f"--method: {exp.name} takes no methods (it builds or trains its own models); these do: "
                         f"{takes}")
    overrides = args.overrides + ([f"methods={';'.join(args.methods)}"] if args.methods else [])
    return runner.resolve_config(exp, parse_overrides(overrides), args.seeds, args.quick)


def cmd_reproduce(args) -> int:
    from attnlab.experiments import registry, runner
    from attnlab.experiments.claims import describe, tally

    if args.list:
        for exp in registry.load_all().values():
            print(f"{exp.name:22s} {exp.summary}")
        return 0
    if not args.name:
        raise UsageError("name an experiment, e.g. `attnlab reproduce scansnap-fig6 --out runs/fig6` "
                         "(see `attnlab list`)")
    exp = registry.get(args.name)
    if args.offline:
        go_offline()
    if args.out is None:
        raise UsageError(f"--out DIR is required: e.g. `attnlab reproduce {exp.name} --out runs/{exp.name}`")
    device = runner.check_device(args.device)
    cfg = reproduce_config(exp, args)
    result = runner.run_into(exp, cfg, args.out, device, runner.command_line(args.argv))
    out = args.out.expanduser().absolute()
    print(f"{exp.name}: {describe(tally(result.claims))}; report: {out / 'report.md'}")
    return 0
