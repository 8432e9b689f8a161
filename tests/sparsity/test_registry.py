"""The rule registry: every registered rule names its class and builder, builds on a tiny model from what
it reads (nothing, a calibration text, saved predictors) and runs masked and gathered alike; the registry
and the command's config import no PyTorch."""
import subprocess
import sys

import pytest
import torch

from attnlab.sparsity.mlp import SparseMLP, SparsityRecord
from attnlab.sparsity.predictor_store import save_predictors
from attnlab.sparsity.predictors import SOURCES, new_predictors
from attnlab.sparsity.registry import READS, RULES, RuleInputs, rule_names
from attnlab.sparsity.rules import NEEDS
from tiny_models import random_ids, tiny


@pytest.fixture(scope="module")
def model():
    return tiny("llama")


def _inputs(kind, model, tmp_path) -> RuleInputs:
    """What ``kind`` reads, made up: a random calibration text, or untrained predictors saved in a folder."""
    if kind.reads == "predictors":
        for s in SOURCES:
            save_predictors(new_predictors(model, "tiny", 8, 0.5, s), tmp_path / s)
    return RuleInputs(calibration=random_ids(64, 1), window=32, model="tiny", predictors=str(tmp_path))


@pytest.mark.parametrize("name", RULES.names())
def test_every_registered_rule_names_its_class_and_what_it_reads(name):
    kind = RULES.get(name)
    cls = kind.rule_class()
    assert cls.name == name and cls.needs in NEEDS and kind.reads in READS and kind.keeps
    assert name in rule_names((kind.reads,))


@pytest.mark.parametrize("name", RULES.names())
def test_every_registered_rule_builds_from_what_it_reads_and_runs_masked_and_gathered_alike(model, tmp_path, name):
    kind = RULES.get(name)
    inputs = _inputs(kind, model, tmp_path)
    rule = kind.build(model, inputs)(0.5)
    assert rule.name == name
    ids = random_ids(24, 2).view(2, 12)
    outs, records = {}, {}
    with torch.no_grad():
        dense = model(ids).logits
        for mode in ("mask", "gather"):
            records[mode] = SparsityRecord()
            with SparseMLP(model, rule, mode=mode, record=records[mode]):
                outs[mode] = model(ids).logits
    torch.testing.assert_close(outs["gather"], outs["mask"], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(outs["mask"], dense, atol=1e-4) and 0 < records["mask"].kept_fraction() < 1


def test_the_registry_and_the_commands_config_import_no_torch():
    code = "import sys, attnlab.sparsity.registry, attnlab.sparsity.configs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
