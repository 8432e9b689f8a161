"""``--method`` on the measuring commands and the experiments that take a model: each takes the kinds of
method it can apply, refuses the others in one line that says why, and a run equals applying the methods by
hand."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest

from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.experiments import registry, runner
from attnlab.methods.base import KINDS, parse
from attnlab.methods.configured import configured

SAMPLES = {"weights": "int8", "rope": "yarn:factor=2", "mlp": "cats:keep=0.5", "kv": "h2o:budget=0.2"}
TAKING = [e.name for e in registry.load_all().values() if "methods" in {f.name for f in fields(e.config_cls)}]


def test_the_measuring_commands_and_model_experiments_take_methods():
    assert {"stream", "eval", "sparsity", "longppl", "passkey", "probe", "sink-table", "streameval", "h2o-ppl",
            "streaming-ppl", "quant-agreement", "probes", "h2o-xsum", "contextual-sparsity", "dejavu", "dejavu-curve",
            "accuracy-table"} <= set(TAKING)


@pytest.mark.parametrize("name", TAKING)
def test_each_kind_is_taken_or_refused_in_one_line(name):
    exp = registry.get(name)
    declared = getattr(exp.config_cls, "METHOD_KINDS", None)
    taken = []
    for kind, spec in SAMPLES.items():
        try:
            cfg = runner.resolve_config(exp, {"methods": spec}, None, False)
        except UsageError as e:
            assert str(e).startswith(f"--method {parse(spec).spec()}: ") and "\n" not in str(e)
            continue
        assert [m.spec() for m in configured(cfg) if m.kind == kind] == [parse(spec).spec()]
        taken.append(kind)
    assert taken and (declared is None or tuple(taken) == tuple(k for k in KINDS if k in declared))


def test_reproduce_takes_method_flags_only_where_the_experiment_takes_a_model(tmp_path, capsys):
    assert main(["reproduce", "scansnap-fig4", "--method", "int8", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "scansnap-fig4 takes no methods" in err and "h2o-ppl" in err and not (tmp_path / "a").exists()
    assert main(["reproduce", "h2o-ppl", "--method", "h2o:budget=0.2", "--out", str(tmp_path / "b")]) == 2
    assert "compares its own KV caches" in capsys.readouterr().err
    assert main(["reproduce", "h2o-ppl", "--method", "int9", "--out", str(tmp_path / "b")]) == 2
    assert "did you mean 'int8'" in capsys.readouterr().err and not (tmp_path / "b").exists()


@pytest.mark.slow
def test_sink_table_with_a_method_equals_applying_it_by_hand(tmp_path):
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.methods import apply
    from attnlab.sinks.table import label, ppl, sink_table
    from sinks.test_sinks import save_variant

    folder = save_variant(tmp_path / "m", "softmax")
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 20)
    common = ["--model", str(folder), "--text", str(tmp_path / "t.txt"), "--tokens", "60", "--window", "16",
              "--sinks", "0,4"]
    assert main(["sink-table", *common, "--method", "int8", "--out", str(tmp_path / "q")]) == 0
    assert main(["sink-table", *common, "--out", str(tmp_path / "f")]) == 0
    got, dense = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("q", "f"))
    model, tok = load_model(str(folder))
    ids = text_ids(tok, str(tmp_path / "t.txt"), 60)
    with apply(model, "int8"):
        by_hand = {label(n, 16): ppl(x) for n, x in sink_table(model, ids, 16, (0, 4)).items()}
    assert got["ppl"] == by_hand and got["methods"] == ["int8"] and dense["methods"] == []
    assert got["ppl"] != dense["ppl"]  # int8 really ran: the float model scores differently


def test_streameval_jobs_hold_their_methods_while_the_process_keeps_the_model(tmp_path):
    from attnlab.core import weights
    from attnlab.quant.transform import projections
    from attnlab.recall import jobs
    from sinks.test_sinks import save_variant

    folder = str(save_variant(tmp_path / "m", "softmax"))
    jobs._model.cache_clear()
    model, _ = jobs._model(folder, ("int8",))
    proj = projections(model, False)[0]
    assert weights.of(proj) is not None  # entered for the runs
    jobs._model(folder, ())  # another model for this process: the first one's methods are released
    assert weights.of(proj) is None
    jobs._model.cache_clear()
    jobs._HELD.close()


def test_the_accuracy_table_runs_every_row_under_its_methods_and_names_each_row_by_its_own():
    exp = registry.get("accuracy-table")
    plain, under = (runner.resolve_config(exp, over, None, False) for over in ({}, {"methods": "int8"}))
    assert [under.name(r) for r in under.rows()] == [plain.name(r) for r in plain.rows()]  # the claims' row names
    assert [plain.name(r) for r in plain.rows()][:2] == ["dense", "h2o 20%"]
    assert all(r.methods_applied()[0].spec() == "int8" for r in under.rows())
    assert [m.spec() for m in under.rows()[1].methods_applied()] == ["int8", "h2o:budget=0.2"]
