"""Bad input, once and for all: every field of every registered experiment's config, given a value of the wrong
type, NaN, ±infinity, 0, a negative, a huge or an empty one through the parser that ``--set``, every command's
flags and every sweep cell use, is either refused with a one-line UsageError (the CLI's one line and exit 2) or
accepted, and then the config still satisfies every field's bounds: no NaN or infinity where the field does not
say it takes them. Nothing runs a step for each value (too slow for the suite); one real run at a boundary value
closes the loop. The validator itself (``check_number``) is checked against its definition."""
import contextlib
import json
import math
import signal

import pytest

from attnlab.cli import main
from attnlab.core.errors import UsageError, check_number, within
from attnlab.experiments import config as config_mod
from attnlab.experiments import registry
from attnlab.train.configs import TrainRun

EXPERIMENTS = registry.load_all()
# every command's config: the experiments' (which the measuring commands run) and attnlab train's
CONFIGS = {name: exp.config_cls for name, exp in EXPERIMENTS.items()} | {"train": TrainRun}
# wrong type, NaN, infinity (also as a float overflow: 1e999), zero, negatives, huge, empty, a tuple holding NaN
VALUES = ("abc", "1.5", "nan", "inf", "-inf", "1e999", "0", "-1", "-1e-9", "1e308", "99999999999999999999", "", ",",
          "none", "nan,1")
LIMIT_S = 5  # building a config from one value takes milliseconds; past this it hangs on the value


@contextlib.contextmanager
def time_limit(seconds: float):
    def expired(signum, frame):
        raise TimeoutError(f"still building the config after {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def outcome(cls, key: str, text: str, metas: dict) -> str | None:
    """What is wrong with how ``--set key=text`` is handled, or None."""
    try:
        with time_limit(LIMIT_S):
            cfg = config_mod.resolve(cls, {key: text})
    except UsageError as e:
        lines = str(e).splitlines()
        return None if len(lines) == 1 and lines[0].strip() else f"refused in {len(lines)} lines: {str(e)!r}"
    except Exception as e:  # noqa: BLE001 -- any other type is the failure this test is for
        return f"{type(e).__name__}: {e}"
    for k, value in config_mod.flatten(cfg).items():  # accepted: the whole config keeps its bounds
        try:
            config_mod.check_field(k, value, metas.get(k, {}))
        except UsageError as e:
            return f"accepted, but {e}"
    return None


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_field_refuses_a_bad_value_in_one_line_or_keeps_its_bounds(name):
    cls = CONFIGS[name]
    metas = config_mod.field_metadata(cls)
    problems = [f"--set {key}={text}: {why}" for key in config_mod.flatten(cls()) for text in VALUES
                if (why := outcome(cls, key, text, metas))]
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_the_values_above_reach_every_kind_of_refusal():
    """The values are not all refused for one reason: NaN, infinity, a float overflow, a huge integer, a wrong
    type and an option's bounds each meet their own check (stream's config: int|float budget, int tokens)."""
    cls = EXPERIMENTS["stream"].config_cls
    says = {}
    for key, text in [("budget", "nan"), ("budget", "-inf"), ("budget", "1e999"), ("tokens", "99999999999999999999"),
                      ("tokens", "abc"), ("tokens", "1"), ("budget", "0")]:
        with pytest.raises(UsageError) as e:
            config_mod.resolve(cls, {key: text})
        says[f"{key}={text}"] = str(e.value)
    assert "finite" in says["budget=nan"] and "finite" in says["budget=-inf"] and "finite" in says["budget=1e999"]
    assert "2**63" in says["tokens=99999999999999999999"] and "type int" in says["tokens=abc"]
    assert says["tokens=1"] == "--set tokens=1: need tokens >= 2" and "budget > 0" in says["budget=0"]


def test_a_field_that_says_it_takes_infinity_gets_it():
    """``allow_nonfinite`` is the one way a field takes NaN or infinity (e.g. "no limit"); bounds still apply."""
    from dataclasses import dataclass

    from attnlab.experiments.command import option

    @dataclass(frozen=True)
    class Limits:
        limit: float = option(10.0, "most of something (inf: no limit)", bounds="> 0", allow_nonfinite=True)
        rate: float = option(0.5, "a rate", bounds="[0, 1]")

    assert config_mod.resolve(Limits, {"limit": "inf"}).limit == math.inf
    for key, text, says in [("limit", "-inf", "need limit > 0"), ("rate", "inf", "finite"), ("rate", "1.5", "[0, 1]")]:
        with pytest.raises(UsageError, match=says):
            config_mod.resolve(Limits, {key: text})


BOUNDS = (">= 0", "> 0", "<= 1", "< 1", "[0, 1]", "(0, 1)", "[0, 1)", "(0, 1]", ">= -2.5")
NUMBERS = (math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 1 + 1e-12, -1e-300, 1e308, -2.5,
           -2.5000001, 0, 1, -1, 2, -3, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**30, True)


@pytest.mark.parametrize("bound", BOUNDS)
def test_check_number_refuses_exactly_what_lies_outside(bound):
    """The one validator against its definition: finite (an int within 64 bits, a float neither NaN nor infinite)
    and within the bound, or a one-line refusal naming how the value was written; a bool is no number."""
    for value in NUMBERS:
        in_int64 = isinstance(value, int) and -2**63 <= value < 2**63
        finite = isinstance(value, bool) or in_int64 or (isinstance(value, float) and math.isfinite(value))
        ok = finite and (isinstance(value, bool) or within(value, bound))
        try:
            check_number("x", value, bound, where="--x")
        except UsageError as e:
            assert not ok and str(e).startswith("--x: ") and "\n" not in str(e), (value, bound, e)
        else:
            assert ok, (value, bound)
    assert not within(math.nan, bound)


def test_a_real_run_at_a_boundary_value_and_its_nan_neighbour(tmp_path, capsys):
    """factor's bound is > 1: the smallest factor above it runs end to end and every claim reads finite numbers; NaN,
    which used to run to exit 0 with claims "within nanx", is one line before anything is written."""
    small = ["--quick", "--set", "num_last=1", "--set", "horizons=1e4,1e5"]
    out = tmp_path / "edge"
    assert main(["reproduce", "scansnap-theorem4-sweep", *small, "--set", "factor=1.0000001", "--out", str(out)]) == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    factor = [c for c in claims if c["test"] == "factor"]
    assert factor and factor[0]["tolerance"] == 1.0000001
    assert all(math.isfinite(c[k]) for c in claims for k in ("measured", "expected", "tolerance"))
    capsys.readouterr()
    bad = tmp_path / "nan"
    assert main(["reproduce", "scansnap-theorem4-sweep", *small, "--set", "factor=nan", "--out", str(bad)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "attnlab: error: --set factor=nan: give factor a finite number (not NaN or infinity)"]
    assert not bad.exists()
