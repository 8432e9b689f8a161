"""A committed result's recorded command still runs: every ``attnlab ...`` command that a file under
benchmarks/results/ records parses, and its config validates, with today's flags (older per-method flags are
aliases that say the new spelling). Nothing is run."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from attnlab.cli import build_parser
from attnlab.experiments import registry
from attnlab.experiments.cli import reproduce_config
from attnlab.experiments.command import config_from_args, run_command

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def recorded() -> list[tuple[str, str]]:
    out = []
    for path in sorted(RESULTS.rglob("*.json")):
        try:
            command = json.loads(path.read_text()).get("command")
        except (ValueError, AttributeError):
            continue
        if isinstance(command, str) and command.startswith("attnlab "):
            out.append((str(path.relative_to(RESULTS)), command))
    return out


RECORDED = recorded()


def test_the_results_record_commands():
    assert len(RECORDED) >= 10 and any(" --quant " in c for _, c in RECORDED)  # an older flag among them


@pytest.mark.parametrize("path, command", RECORDED, ids=[p for p, _ in RECORDED])
def test_a_recorded_command_parses_and_its_config_validates(path, command):
    args = build_parser().parse_args(shlex.split(command)[1:])
    if getattr(args, "func", None) is run_command:  # a measuring command: its flags are its config's
        config_from_args(registry.get(args.experiment).config_cls, args)
    elif args.command == "reproduce":
        reproduce_config(registry.get(args.name), args)
