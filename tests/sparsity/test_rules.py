"""The sparsity rules on plain tensors: keep counts, top-k masks, calibrated thresholds, Oracle/CATS/TEAL/Static."""
import subprocess
import sys

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.sparsity.rules import (
    CATS,
    RULES,
    TEAL,
    Oracle,
    Static,
    keep_count,
    magnitude_threshold,
    make_rule,
    topk_mask,
)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n, keep, k", [(64, 1.0, 64), (64, 0.5, 32), (64, 0.25, 16), (10, 0.33, 3), (10, 0.01, 1),
                                        (1536, 0.35, 538)])
def test_keep_count_rounds_and_keeps_at_least_one(n, keep, k):
    assert keep_count(n, keep) == k


@pytest.mark.parametrize("keep", [0, 0.0, 1.5, -1, float("nan"), True, "0.5"])
def test_a_keep_fraction_outside_0_1_is_one_line_naming_the_fix(keep):
    with pytest.raises(UsageError, match=r"give a number in \(0, 1\], e\.g\. 0\.5") as e:
        keep_count(64, keep)
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError):
        Oracle(keep)


def test_topk_mask_keeps_exactly_the_k_largest_of_each_row():
    scores = _randn(3, 5, 40)  # (B, T, n)
    mask = topk_mask(scores, 0.25)
    assert mask.dtype == torch.bool and mask.shape == scores.shape
    assert (mask.sum(-1) == 10).all()
    smallest_kept = scores.masked_fill(~mask, float("inf")).min(-1).values
    largest_dropped = scores.masked_fill(mask, float("-inf")).max(-1).values
    assert (smallest_kept > largest_dropped).all()
    assert topk_mask(scores, 1.0).all()


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.75])
def test_magnitude_threshold_keeps_the_asked_share_of_the_samples(keep):
    samples = _randn(200, 64)
    t = magnitude_threshold(samples, keep)
    assert (samples.abs() >= t).float().mean().item() == pytest.approx(keep, abs=1 / samples.numel())


def test_magnitude_threshold_at_keep_1_keeps_every_entry_of_any_text():
    assert magnitude_threshold(_randn(10, 8), 1.0) == 0.0


def test_oracle_ranks_by_magnitude_not_sign():
    h = torch.tensor([[-5.0, 1.0, 3.0, -0.5]])  # (1, 4)
    assert Oracle(0.5).mask(h, 0).tolist() == [[True, False, True, False]]


def test_cats_keeps_the_neurons_whose_gate_activation_reaches_the_threshold():
    gate = torch.tensor([[0.2, -0.6, 0.5, -0.1]])
    assert CATS({0: 0.5, 1: 0.1}).mask(gate, 0).tolist() == [[False, True, True, False]]
    assert CATS({0: 0.5, 1: 0.1}).mask(gate, 1).tolist() == [[True, True, True, True]]


def test_teal_thresholds_the_input_channels_and_optionally_h():
    x = torch.tensor([[0.3, -2.0, 0.05]])
    teal = TEAL({0: 0.1}, {0: 1.0})
    assert teal.mask(x, 0).tolist() == [[True, True, False]]
    assert teal.mask_h(torch.tensor([[0.5, -1.5]]), 0).tolist() == [[False, True]]
    assert TEAL({0: 0.1}).mask_h(x, 0) is None


def test_static_keeps_the_same_neurons_for_every_token():
    rule = Static({0: torch.tensor([1, 3])})
    mask = rule.mask(_randn(2, 5, 6), 0)  # broadcastable to (B, T, n)
    assert mask.shape == (1, 1, 6)
    assert mask.expand(2, 5, 6).sum(-1).eq(2).all() and mask[0, 0].tolist() == [False, True, False, True, False, False]


@pytest.mark.parametrize("build, message", [
    (lambda: CATS({0: 0.5}).check(1, 64), r"CATS has no threshold for layer 1 \(it has layers 0\)"),
    (lambda: CATS({0: -0.1}), r"finite and >= 0"),
    (lambda: TEAL({0: float("nan")}), r"finite and >= 0"),
    (lambda: TEAL({0: 0.1}, {1: 0.1}).check(0, 64), r"TEAL has no h threshold for layer 0"),
    (lambda: Static({0: torch.tensor([0, 70])}).check(0, 64), r"has neuron 70, but the layer has 64"),
    (lambda: Static({0: torch.tensor([], dtype=torch.long)}), r"non-empty 1-D tensor"),
    (lambda: Static({0: torch.tensor([0.5])}), r"non-empty 1-D tensor"),
])
def test_a_rule_that_cannot_serve_a_layer_says_so_in_one_line(build, message):
    with pytest.raises(UsageError, match=message) as e:
        build()
    assert "\n" not in str(e.value)


def test_rules_are_found_by_name_with_did_you_mean():
    assert all(RULES.get(cls.name).rule_class() is cls for cls in (Oracle, CATS, TEAL, Static))
    assert make_rule("oracle", 0.5) == Oracle(0.5)
    with pytest.raises(UsageError, match=r"unknown sparsity rule 'oracel': did you mean 'oracle'\?") as e:
        make_rule("oracel", 0.5)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_rules_import_neither_transformers_nor_anything_that_does():
    code = "import sys, attnlab.sparsity.rules; print(sorted(m for m in sys.modules if m.startswith(('transformers', " \
           "'attnlab.models'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
