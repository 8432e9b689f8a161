"""A name becomes an object in one place, its registry: a KV policy, a sparsity rule or a probe registered
there (and nowhere else) reaches the command's --help, its config's validation and a sweep's cells."""
from __future__ import annotations

import re
from dataclasses import dataclass, fields

import pytest
import torch

from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.experiments import registry, runner
from attnlab.kv.policies import POLICIES, KVPolicy, SlotState
from attnlab.probes.base import PROBES, Probe
from attnlab.sparsity.registry import RULES, RuleKind
from attnlab.sweep.grid import make_grid

NAME = "throwaway-oldest"  # a name no real item has
RULE = "throwaway-rule"  # the rule's: a method name is one method's, whatever its kind


def unwrapped(text: str) -> str:
    """Help text with argparse's line wrapping undone: a hyphenated name may be broken after its hyphen."""
    return re.sub(r"-\n\s*", "-", text)


@dataclass(frozen=True)
class KeepOldest(KVPolicy):
    """Keeps the oldest tokens: a policy no paper proposes, registered only by this test."""

    name = NAME

    def priority(self, s: SlotState) -> torch.Tensor:  # (B, H, S)
        return -s.pos.to(torch.float32)


class CountTokens(Probe):
    """Counts the tokens it sees: a probe registered only by this test."""

    name = NAME
    needs = ("blocks.0.resid_post",)
    summary = "a throwaway probe that counts tokens"

    def __init__(self, **_):
        self.tokens = 0

    def see(self, name: str, t: torch.Tensor, start: int) -> None:
        self.tokens += t.shape[1]

    def result(self) -> dict:
        return {"tokens": self.tokens}


@pytest.fixture
def throwaways(monkeypatch):
    """One policy, one rule and one probe, each in its registry for this test only."""
    from attnlab.probes.run import load_probes

    load_probes()  # the real probes first, so that the throwaway is one among them
    monkeypatch.setitem(POLICIES._items, NAME, KeepOldest)
    monkeypatch.setitem(RULES._items, RULE, RuleKind(RULE, "a throwaway rule: the oracle's set", "nothing",
                                                      "attnlab.sparsity.rules:Oracle",
                                                      "attnlab.sparsity.measure:uncalibrated"))
    monkeypatch.setitem(PROBES._items, NAME, CountTokens)


# command, the config key that names the item, a grid value of the key with the throwaway in it
CASES = [("stream", "policy", f"sinks;{NAME}"), ("sparsity", "rule", f"oracle;{RULE}"),
         ("probe", "probes", f"sinks;{NAME}")]
# a policy or rule is a method at once (attnlab.methods reads their registries): --method takes it everywhere
METHOD_CASES = [("stream", f"h2o:budget=8;{NAME}:budget=8"), ("eval", f"h2o:budget=8;{NAME}:budget=8"),
                ("eval", f"oracle;{RULE}:keep=0.25")]


@pytest.mark.parametrize("command, key, axis", CASES)
def test_a_registered_name_reaches_help_validation_and_sweep(throwaways, capsys, command, key, axis):
    name = axis.split(";")[1]
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0 and name in unwrapped(capsys.readouterr().out)  # --help lists it

    exp = registry.get(command)
    cfg = runner.resolve_config(exp, {key: name}, None, False)  # validation takes it (an older flag: as a method)
    taken = [m.name for m in cfg.methods_applied()] if hasattr(cfg, "methods_applied") and not hasattr(cfg, key) \
        else getattr(cfg, key) if isinstance(getattr(cfg, key), tuple) else (getattr(cfg, key),)
    assert name in taken
    with pytest.raises(UsageError, match="did you mean"):  # and still refuses a misspelt one
        runner.resolve_config(exp, {key: name + "x"}, None, False)

    cells = make_grid(exp.name, exp.config_cls, [f"{key}={axis}"], {}, None, False).cells()
    assert [c.overrides[key] for c in cells] == axis.split(";")  # a sweep's cells name it
    for cell in cells:
        runner.resolve_config(exp, cell.overrides, None, False)


def test_without_the_registration_the_name_is_refused_everywhere(capsys):
    for command, key, _ in CASES:
        with pytest.raises(UsageError):
            runner.resolve_config(registry.get(command), {key: NAME}, None, False)
        assert main([command, "--out", "unused", f"--{key}", NAME]) == 2
        assert NAME in capsys.readouterr().err


@pytest.mark.parametrize("command, axis", METHOD_CASES)
def test_a_registered_name_is_a_method_in_help_validation_and_sweep(throwaways, capsys, command, axis):
    spec = axis.split(";")[1]
    name = spec.partition(":")[0]
    assert main(["methods"]) == 0 and name in capsys.readouterr().out  # `attnlab methods` lists it
    exp = registry.get(command)
    cfg = runner.resolve_config(exp, {"methods": spec}, None, False)
    assert name in [m.name for m in cfg.methods_applied()]
    with pytest.raises(UsageError, match="did you mean"):
        runner.resolve_config(exp, {"methods": spec.replace(name, name + "x")}, None, False)
    cells = make_grid(exp.name, exp.config_cls, [f"methods={axis}"], {}, None, False).cells()
    assert [c.overrides["methods"] for c in cells] == axis.split(";")
    for cell in cells:
        runner.resolve_config(exp, cell.overrides, None, False)


# the proof: a KV policy with its own option, a second weight scheme and a RoPE scaling whose parameters
# are options, each one file (kv/policy_tova.py, quant/schemes/int4.py, YaRN in rope/scalings.py) and no other edit
PROOFS = {"kv": "tova:budget=0.5,heads=each", "weights": "int4", "rope": "yarn:factor=2,beta_fast=16"}
TAKING = [e.name for e in registry.load_all().values() if "methods" in {f.name for f in fields(e.config_cls)}]


@pytest.mark.parametrize("name", TAKING)
def test_the_one_file_methods_reach_every_command_that_takes_their_kind(name, capsys):
    from attnlab.methods.base import parse
    from attnlab.methods.configured import configured

    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    exp, reached = registry.get(name), []
    for kind, spec in PROOFS.items():
        assert spec.partition(":")[0] in listed  # `attnlab methods` (and so --method's help) names it
        try:
            cfg = runner.resolve_config(exp, {"methods": spec}, None, False)  # validation takes it
        except UsageError as e:
            assert str(e).startswith("--method ")  # a kind this command compares itself: one line saying so
            continue
        assert parse(spec) in configured(cfg)
        cells = make_grid(exp.name, exp.config_cls, [f"methods={spec};"], {}, None, False).cells()
        assert [c.overrides["methods"] for c in cells][:1] == [spec]  # a sweep's cell names it
        reached.append(kind)
    assert "weights" in reached or "rope" in reached
