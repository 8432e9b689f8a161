"""The ``probes`` experiment end to end on a tiny model folder and a made-up text (the real run uses
SmolLM2 and WikiText-2), its place in the talk and probe discovery (each probe's contract: test_contract.py)."""
import json
import pkgutil
import sys

import pytest

import attnlab.probes
from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.experiments import registry
from attnlab.probes.base import PROBES
from attnlab.probes.experiments import ProbesConfig
from attnlab.probes.run import MACHINERY, ORDER, load_probes, probe_modules
from tiny_models import save_hf, texts_and_cache


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, _ = texts_and_cache(tmp_path, monkeypatch, repeat=6)
    return save_hf(tmp_path / "m"), text


def _reproduce(out, setup, *sets, quick=False):
    model, text = setup
    sets = [f"model={model}", f"text={text}", "tokens=48", "chunk=16", "probes=sinks", "replacements=a,b", *sets]
    return main(["reproduce", "probes", "--out", str(out), *(["--quick"] if quick else [])]
                + [a for s in sets for a in ("--set", s)])


@pytest.mark.slow
def test_experiment_runs_the_probes_and_the_position_check(setup, tmp_path):
    out = tmp_path / "run"
    assert _reproduce(out, setup) == 0
    m = json.loads((out / "metrics.json").read_text())
    claims = m["claims"]
    assert [c["status"] in ("holds", "fails") for c in claims] == [True, True, False, False, True, True]
    pos, sinks = m["sinks_position"], m["sinks"]
    assert set(pos) == {"original_token", "original_id", "a", "b"} and pos["a"]["token_id"] != pos["b"]["token_id"]
    for claim, label in zip(claims[4:], "ab"):
        assert repr(label) in claim["claim"] and claim["test"] == "rel"
        assert claim["measured"] == pos[label]["deep_first_token_share"]
        assert claim["expected"] == sinks["deep_first_token_share"]
        assert claim["holds"] == (abs(claim["measured"] - claim["expected"]) <= 0.2 * claim["expected"])
    assert (out / "sinks_heads.png").stat().st_size > 0 and (out / "sinks_position.png").stat().st_size > 0


@pytest.mark.slow
def test_a_quick_run_decides_what_a_short_text_can_and_leaves_the_rest_unresolved(setup, tmp_path):
    """judge=false (quick): the sinks' claims and the position check still hold or fail; a claim of a probe
    that needs a long text (heavy hitters' power law) is unresolved, with why, never a finding."""
    from attnlab.probes.base import PROBES

    judged, quick = tmp_path / "judged", tmp_path / "quick"
    both = ("probes=sinks,heavy-hitters", "tokens=96")
    assert _reproduce(judged, setup, *both) == 0 and _reproduce(quick, setup, *both, "judge=false") == 0
    a = json.loads((judged / "metrics.json").read_text())["claims"]
    b = json.loads((quick / "metrics.json").read_text())["claims"]
    assert [c["claim"] for c in a] == [c["claim"] for c in b]
    assert {"unresolved", "holds"} <= {c["status"] for c in b} or {"unresolved", "fails"} <= {c["status"] for c in b}
    short = {n for n in PROBES.names() if PROBES.get(n).decides_on_short_texts}
    assert "sinks" in short and "heavy-hitters" not in short
    for x, y in zip(a, b):
        assert (x["status"] == "finding") == (y["status"] == "finding")  # a checked claim never becomes a finding
        if y["status"] == "unresolved":
            assert x["status"] in ("holds", "fails") and "too few" in y["note"] and y["holds"] is None
        else:
            assert y == x  # the same claim, decided alike


@pytest.mark.slow
def test_a_replacement_that_is_not_one_token_is_one_line_exit_2(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert _reproduce(out, setup, "replacements=ab") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'ab' is 2 tokens" in err[0] and not out.exists()


def test_an_unknown_probe_name_says_did_you_mean():
    with pytest.raises(UsageError, match="did you mean 'sinks'"):
        ProbesConfig(probes=("sinkss",))


def test_every_probe_module_is_discovered_and_registered():
    names = load_probes()
    modules = probe_modules()
    everything = [i.name.rsplit(".", 1)[-1] for i in pkgutil.iter_modules(attnlab.probes.__path__)]
    assert {"experiments", "exp_probe"} <= set(everything) and set(MACHINERY) <= set(everything)
    assert "attnlab.probes.sinks" in modules and all(m in sys.modules for m in modules)
    assert not any(m.rsplit(".", 1)[-1] in ("experiments", "exp_probe", *MACHINERY) for m in modules)
    assert "sinks" in names and len(names) >= len(modules)


def test_probes_sit_in_the_talk_between_real_text_and_the_kv_policies():
    exps = registry.load_all()
    assert exps["probes"].part == "probes: inside a pretrained model"
    parts = list(dict.fromkeys(e.part for e in exps.values()))
    assert parts.index("real text") + 1 == parts.index(exps["probes"].part) == parts.index("KV-cache policies") - 1


def test_probes_are_listed_in_the_issues_order():
    names = load_probes()
    modules = [PROBES.get(n).__module__.rsplit(".", 1)[-1] for n in names]
    ranks = [ORDER.index(m) if m in ORDER else len(ORDER) for m in modules]
    assert names[0] == "sinks" and ranks == sorted(ranks)
