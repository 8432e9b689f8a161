"""The probe contract, for every registered probe (parametrised over the registry, so a new probe is tested
the day it registers): streamed over a tiny model it returns JSON-able metrics, well-formed claims and the
figures it names, and leaves the model as it was; its options are typed and its bounds refuse bad values."""
import json
import math
import typing

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.experiments.claims import Claim
from attnlab.experiments.runner import RunContext
from attnlab.probes.base import PROBES, within
from attnlab.probes.run import load_probes, option_types, probe_options, run_probes
from tiny_models import ARCHS, random_ids

NAMES = load_probes()
T, CHUNK = 96, 32  # 3 chunks with the KV cache; heavy-hitters needs T >= its heavy = recent = 64


def _state(model):
    """What a probe must leave as it found it: weights, attention implementation, mode, hooks."""
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return ({k: v.clone() for k, v in model.state_dict().items()}, model.config._attn_implementation,
            model.training, hooks)


def _same(a, b) -> bool:
    return a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and a[1:] == b[1:]


@pytest.mark.parametrize("arch", [a if a == "llama" else pytest.param(a, marks=pytest.mark.slow) for a in ARCHS])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_every_probe_keeps_the_contract(tiny_models, tmp_path, name, arch):
    model = tiny_models[arch]
    before = _state(model)
    ctx = RunContext(tmp_path, show_progress=False)
    metrics, claims, figures = run_probes(model, random_ids(T, seed=1), (name,), CHUNK, ctx,
                                          decode=lambda ids: " ".join(map(str, ids)), window=48)
    assert _same(before, _state(model))
    assert list(metrics) == [name]
    json.dumps(metrics)  # lists, dicts, numbers and strings only (the runner writes NaN as null)
    for c in claims:
        assert isinstance(c, Claim) and c.claim.strip() and isinstance(c.measured, float)
        assert c.status in ("holds", "fails", "erratum", "finding")
        json.dumps(c.to_json())
        if c.status in ("holds", "fails"):  # a check: its verdict is its test applied to its numbers
            assert c.expected is not None and c.test and (c.status == "holds") == c.holds
            assert not math.isnan(c.measured) or c.status == "fails"
    for file, caption in figures.items():
        assert (tmp_path / file).stat().st_size > 0 and caption.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(figures)  # no file left unnamed


def _outside(bound: str):
    """A value just outside ``bound`` ('>= 1', '> 0', '[0, 1]', '(0.5, 1)', ...)."""
    if bound[0] in "[(":
        hi = float(bound[1:-1].split(",")[1])
        return hi + (0 if bound[-1] == ")" else 0.5)
    op, a = bound.split()
    return float(a) - (0 if op == ">" else 1)


def _element(typ):
    """The scalar type of an option's annotation: int for int, int | None, tuple[int, ...], ..."""
    while typing.get_args(typ):
        typ = next(a for a in typing.get_args(typ) if a is not type(None))
    return typ


def _is_tuple(typ) -> bool:
    return any(typing.get_origin(t) is tuple for t in (typ, *typing.get_args(typ)))


@pytest.mark.parametrize("name", NAMES)
def test_every_numeric_option_is_bounded_and_its_bound_refuses(name):
    cls, types = PROBES.get(name), option_types((name,))
    cls()  # the defaults lie within the bounds
    numeric = {k for k, t in types.items() if _element(t) in (int, float)}
    assert numeric <= set(cls.bounds), f"{name}: give {sorted(numeric - set(cls.bounds))} a range in `bounds`"
    for key, bound in cls.bounds.items():
        bad = _element(types[key])(_outside(bound))
        assert not within(bad, bound)
        with pytest.raises(UsageError, match=f"{name}: {key}=") as e:
            cls(**{key: (bad,) if _is_tuple(types[key]) else bad})
        assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("text, says", [
    ("eps=abc", "--option eps=abc: expected a value of type float"),
    ("eps=none", "--option eps=none: expected a value of type float"),
    ("heavy=abc", "--option heavy=abc: expected a value of type int"),
    ("entries=abc", "--option entries=abc: expected a value of type int"),
    ("first=2.5", "--option first=2.5: expected a value of type int"),
])
def test_an_option_is_read_by_its_annotation(text, says):
    with pytest.raises(UsageError, match=says):
        probe_options((text,), tuple(NAMES))


def test_options_are_typed_values():
    got = probe_options(("eps=0.25", "heavy=8", "layers=1", "shares=0.1,0.2", "gap=none", "delimiters=13"),
                        tuple(NAMES))
    assert got == {"eps": 0.25, "heavy": 8, "layers": (1,), "shares": (0.1, 0.2), "gap": None, "delimiters": (13,)}
    assert "decode" not in option_types(tuple(NAMES))  # a callable is no option
