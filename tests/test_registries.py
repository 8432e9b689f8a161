"""A name becomes an object in one place, its registry: a KV policy, a sparsity rule or a probe registered
there (and nowhere else) reaches the command's --help, its config's validation and a sweep's cells."""
from __future__ import annotations

from dataclasses import dataclass

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
    monkeypatch.setitem(RULES._items, NAME, RuleKind(NAME, "a throwaway rule: the oracle's set", "nothing",
                                                      "attnlab.sparsity.rules:Oracle",
                                                      "attnlab.sparsity.measure:uncalibrated"))
    monkeypatch.setitem(PROBES._items, NAME, CountTokens)


# command, the config key that names the item, a grid value of the key with the throwaway in it
CASES = [("stream", "policy", f"sinks;{NAME}"), ("sparsity", "rule", f"oracle;{NAME}"),
         ("probe", "probes", f"sinks;{NAME}")]


@pytest.mark.parametrize("command, key, axis", CASES)
def test_a_registered_name_reaches_help_validation_and_sweep(throwaways, capsys, command, key, axis):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0 and NAME in capsys.readouterr().out  # --help lists it

    exp = registry.get(command)
    cfg = runner.resolve_config(exp, {key: NAME}, None, False)  # validation takes it
    assert NAME in (getattr(cfg, key) if isinstance(getattr(cfg, key), tuple) else (getattr(cfg, key),))
    with pytest.raises(UsageError, match="did you mean"):  # and still refuses a misspelt one
        runner.resolve_config(exp, {key: NAME + "x"}, None, False)

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
