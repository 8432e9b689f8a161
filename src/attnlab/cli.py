"""The ``attnlab`` command line.

    attnlab demo                          every experiment, quick settings, one report folder
    attnlab reproduce --list              the registered experiments, one line each
    attnlab reproduce NAME --out DIR      one experiment: config.json, metrics.json, figures, report.md
    attnlab train --train TEXT --out DIR  the tracking trainer on your own corpus
    attnlab generate --model DIR --prompt TEXT   continue a prompt with a trained checkpoint
    attnlab stream --model smollm2 --policy sinks --budget 256 --out DIR   KV-cache policy: PPL, bytes, tokens/s
    attnlab models fetch smollm2 | list   pretrained models by name, converted once into the cache
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from attnlab import __version__
from attnlab.core.errors import UsageError

DEMO_EXPERIMENTS: tuple[str, ...] | None = None  # None: every registered experiment

EPILOG = """examples:
  attnlab demo                                   # 1-3 minutes on 2 CPU cores; prints where the report is
  attnlab reproduce --list
  attnlab reproduce scansnap-fig6 --out runs/fig6
  attnlab reproduce scansnap-fig6 --out runs/fig6-quick --seeds 3 --set num_last=1,3 --set sgd.steps=50
  attnlab reproduce scansnap-theorems --out runs/thm --set ratios=10,30,100

Every run folder holds config.json (the fully resolved config), metrics.json (each claim:
measured, expected, tolerance, holds), PNG figures and report.md."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's default prints usage too)
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="attnlab",
        description="attnlab: how self-attention trains (Scan&Snap, JoMA), made runnable, "
        "with each theorem checked as measured vs predicted.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    demo = sub.add_parser(
        "demo",
        help="run the experiments on their quick defaults and write one report (report.md + index.html)",
        description="Run every registered experiment (quick settings where an experiment has them) into one "
        "folder, with report.md and an index.html that shows every figure and every claim with ✓/✗. The "
        "long-context ones (passkey, rope-zero-shot, pi-finetune) take too long for a demo: run them with "
        "`attnlab reproduce`.",
    )
    demo.add_argument("--out", default="attnlab-demo", type=Path, help="report folder (default: ./attnlab-demo)")
    demo.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    demo.add_argument("--full", action="store_true", help="use each experiment's full settings, not the quick ones")

    rep = sub.add_parser(
        "reproduce",
        help="run one experiment (a paper figure or theorem check) into a folder",
        description="Run one registered experiment. Writes DIR/config.json, DIR/metrics.json "
        "(claims: measured, expected, tolerance, holds), PNG figures and DIR/report.md. A previous "
        "run in DIR is replaced only once the new one has completed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rep.add_argument("name", nargs="?", help="experiment name (see --list)")
    rep.add_argument("--list", action="store_true", help="list the experiments, one line each")
    rep.add_argument("--out", type=Path, help="output folder (required to run)")
    rep.add_argument("--seeds", type=int, help="number of seeds, 1..N (experiments with a 'seeds' setting)")
    rep.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    rep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set sgd.steps=50 --set eta_z=1,2 (repeatable)")
    rep.add_argument("--quick", action="store_true", help="use the experiment's quick settings (as the demo does)")

    from attnlab.kv import cli as stream_cli
    from attnlab.models import cli as models_cli, generate_cli
    from attnlab.rope import cli as rope_cli
    from attnlab.train import cli as train_cli

    train_cli.add_parser(sub)
    generate_cli.add_parser(sub)
    stream_cli.add_parser(sub)
    rope_cli.add_parser(sub)
    models_cli.add_parser(sub)
    return p


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write KEY=VALUE, e.g. --set sgd.steps=50")
        out[key.strip()] = value.strip()
    return out


def cmd_reproduce(args, argv: list[str]) -> int:
    from attnlab.experiments import registry, runner

    if args.list:
        for exp in registry.load_all().values():
            print(f"{exp.name:22s} {exp.summary}")
        return 0
    if not args.name:
        raise UsageError("name an experiment, e.g. `attnlab reproduce scansnap-fig6 --out runs/fig6` (or use --list)")
    exp = registry.get(args.name)
    if args.out is None:
        raise UsageError(f"--out DIR is required: e.g. `attnlab reproduce {exp.name} --out runs/{exp.name}`")
    device = runner.check_device(args.device)
    cfg = runner.resolve_config(exp, _parse_overrides(args.overrides), args.seeds, args.quick)
    command = "attnlab " + " ".join(shlex.quote(str(a)) for a in argv)
    with runner.staged_output(args.out) as stage:
        result = runner.execute(exp, cfg, stage, device, True, command)
    out = args.out.expanduser().absolute()
    held = sum(c.holds for c in result.claims)
    print(f"{exp.name}: {held}/{len(result.claims)} claims hold; report: {out / 'report.md'}")
    return 0


def cmd_demo(args) -> int:
    import shutil

    from attnlab.core.errors import MissingResource
    from attnlab.experiments import registry, runner
    from attnlab.experiments.report import demo_index_html, demo_report_md

    device = runner.check_device(args.device)
    t0 = time.perf_counter()
    sections, skipped = [], []
    with runner.staged_output(args.out) as stage:
        for name in DEMO_EXPERIMENTS or tuple(k for k, e in registry.load_all().items() if e.demo):
            exp = registry.get(name)
            cfg = runner.resolve_config(exp, {}, None, quick=not args.full)
            (stage / name).mkdir()
            command = f"attnlab reproduce {name} --out {name}" + ("" if args.full else " --quick")
            print(f"[demo] {name} ...", file=sys.stderr, flush=True)
            try:
                result = runner.execute(exp, cfg, stage / name, device, True, command)
            except MissingResource as e:  # real-text experiments need a corpus or model this machine may lack
                shutil.rmtree(stage / name)
                skipped.append(f"{name}: skipped ({e})")
                print(f"[demo] {skipped[-1]}", file=sys.stderr, flush=True)
                continue
            sections.append((name, exp, result))
        seconds = time.perf_counter() - t0
        (stage / "index.html").write_text(demo_index_html(sections, seconds))
        (stage / "report.md").write_text(demo_report_md(sections, seconds)
                                         + "".join(f"\n- {line}" for line in skipped) + ("\n" if skipped else ""))
    out = args.out.expanduser().absolute()
    total = sum(len(r.claims) for _, _, r in sections)
    held = sum(c.holds for _, _, r in sections for c in r.claims)
    print(f"attnlab demo: {held}/{total} claims hold in {seconds:.0f} s")
    print(f"report: {out / 'index.html'}  (and {out / 'report.md'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        if args.command == "reproduce":
            return cmd_reproduce(args, argv)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "train":
            from attnlab.train.cli import cmd_train

            return cmd_train(args)
        if args.command == "stream":
            from attnlab.kv.cli import cmd_stream

            return cmd_stream(args, argv)
        if args.command in ("passkey", "longppl"):
            from attnlab.rope.cli import cmd_rope

            return cmd_rope(args, argv)
        if args.command == "generate":
            from attnlab.models.generate_cli import cmd_generate

            return cmd_generate(args)
        if args.command == "models":
            from attnlab.models.cli import cmd_models

            return cmd_models(args)
        parser.print_help()
        return 0
    except UsageError as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnlab: interrupted; nothing was written", file=sys.stderr)
        return 130
