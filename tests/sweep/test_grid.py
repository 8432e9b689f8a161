"""The grid of `attnlab sweep`, without Ray: axes, seeds, cells and their names."""
import pytest

from attnlab.core.errors import UsageError
from attnlab.experiments import registry
from attnlab.sweep.grid import Cell, make_grid
from attnlab.sweep.report import markdown, rows


def grid(name, axes, sets=None, seeds=None):
    exp = registry.get(name)
    return make_grid(exp.name, exp.config_cls, axes, sets or {}, seeds, False)


def test_cells_are_the_product_of_the_axes_and_the_seeds_in_axis_order():
    g = grid("scansnap-fig4", ["eta_z=0.5,1", "sgd.steps=5,10,20"], {"data.T": "64"}, seeds=2)
    cells = g.cells()
    assert len(cells) == 2 * 3 * 2
    assert cells[0].name == "eta_z=0.5,sgd.steps=5,seed=0" and cells[-1].name == "eta_z=1,sgd.steps=20,seed=1"
    assert len({c.folder for c in cells}) == len(cells)  # one folder a cell
    assert all(c.overrides["data.T"] == "64" for c in cells)  # fixed settings in every cell


def test_a_list_valued_key_separates_its_values_with_semicolons():
    g = grid("passkey", ["lengths=1024,2048;4096", "scalings=none;ntk"])
    assert [c.overrides["lengths"] for c in g.cells()][::2] == ["1024,2048", "4096"]


def test_seeds_become_an_axis_or_pass_through_where_the_experiment_batches_them():
    assert [c.overrides.get("seed") for c in grid("scansnap-fig4", [], seeds=3).cells()] == ["0", "1", "2"]
    fig6 = grid("scansnap-fig6", ["eta_z=1;2"], seeds=4).cells()
    assert [c.overrides["seeds"] for c in fig6] == ["4", "4"] and "seed" not in fig6[0].overrides


def test_the_table_names_the_settings_every_cell_shares(tmp_path):
    """seeds=N passed through to every cell is such a setting, beside the --set ones."""
    fig6 = grid("scansnap-fig6", ["eta_z=1;2"], {"num_last": "3"}, seeds=4)
    text = markdown(fig6, rows(tmp_path, fig6, []), [])
    assert "0/2 cells done, 0 failed, 2 not run. Fixed settings: num_last=3, seeds=4." in text


def test_folder_names_are_safe_on_any_file_system():
    cell = Cell((("text", "../shared/data/kjv kjv.txt"),))
    assert "/" not in cell.folder and " " not in cell.folder


@pytest.mark.parametrize("axes, sets, seeds, message", [
    (["eta=1,2"], {}, None, "did you mean 'eta_z'"),
    (["eta_z="], {}, None, "the axis eta_z is empty"),
    (["eta_z"], {}, None, "write KEY=V1,V2"),
    (["eta_z=1,1"], {}, None, "appears twice"),
    (["eta_z=1,2", "eta_z=3"], {}, None, "eta_z: each key is either one --grid axis or a --set"),
    (["eta_z=1,2"], {"eta_z": "3"}, None, "not both"),
    ([], {}, None, "needs at least one --grid"),
    (["eta_z=1"], {}, 0, "--seeds 0"),
])
def test_bad_grids_are_one_line(axes, sets, seeds, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        grid("scansnap-fig4", axes, sets, seeds)


def test_passkey_cells_of_one_scaling_resolve_and_zero_shot_cells_without_none_are_refused(tmp_path):
    """passkey's claims are per scaling, so a cell per (length, scaling) is a whole run; rope-zero-shot's PPL
    claims divide by the unscaled run, so its cells need 'none' -- refused with the config, before Ray starts."""
    from attnlab.cli import main
    from attnlab.experiments import runner

    for cell in grid("passkey", ["lengths=4096;16384", "scalings=pi;yarn"]).cells():
        assert runner.resolve_config(registry.get("passkey"), cell.overrides, None, False).scalings[0] in ("pi", "yarn")
    argv = ["sweep", "rope-zero-shot", "--grid", "scalings=none;pi", "--out", str(tmp_path / "s")]
    assert main(argv) == 2 and not (tmp_path / "s").exists()
    assert main(["sweep", "passkey", "--grid", "scalings=none;yarm", "--out", str(tmp_path / "s")]) == 2


def test_seeds_for_a_deterministic_experiment_are_refused():
    with pytest.raises(UsageError, match="no seed to vary"):
        grid("h2o-ppl", ["budget=64,128"], seeds=2)


def test_without_ray_the_sweep_names_the_install_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import sys

    from attnlab.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    out = tmp_path / "sweep"
    assert main(["sweep", "scansnap-fig4", "--grid", "eta_z=1,2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'attnlab[sweep]'" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_claims_are_tabulated_by_wording_not_by_position():
    """Fig. 6's cells hold different claims (1/2 tokens: 3, the others: 4); one claim worded with a cell's own
    numbers stays one column, captioned with # where the cells' numbers differ and the shared numbers kept."""
    g = grid("scansnap-fig6", ["num_last=1,3"])

    def done(num_last, claims):
        return {"cell": f"num_last={num_last}", "axes": {"num_last": str(num_last)}, "status": "done", "metrics": {},
                "claim_counts": {"holds": len(claims)}, "claims": [{"claim": c, "measured": m, "status": "holds"}
                                                                   for c, m in claims]}
    table = [done(1, [("entropy falls at 1/2", 0.5), ("sparse", 1.0)]),
             done(3, [("entropy falls at 3/2", 0.25), ("dips at 2", 0.75), ("sparse", 0.9)])]
    text = markdown(g, table, [])
    assert "| 1 | done | 2/2 | 0.5 (holds) | 1 (holds) |  |" in text  # columns in the order first seen
    assert "| 3 | done | 3/3 | 0.25 (holds) | 0.9 (holds) | 0.75 (holds) |" in text
    assert text.endswith("1. entropy falls at #/2\n2. sparse\n3. dips at 2\n")


def test_an_unresolved_claim_counts_as_checked_not_held():
    """'claims hold' is held/checked as describe() counts it: an unresolved claim is checked, neither held nor
    failed, and its cell says so."""
    g = grid("scansnap-fig6", ["num_last=1,3"])

    def done(num_last, statuses):
        counts = {s: statuses.count(s) for s in ("holds", "fails", "unresolved", "erratum", "finding")}
        return {"cell": f"num_last={num_last}", "axes": {"num_last": str(num_last)}, "status": "done", "metrics": {},
                "claim_counts": counts, "claims": [{"claim": f"claim {'abc'[i]}", "measured": 0.5,
                                                   "status": s} for i, s in enumerate(statuses)]}
    text = markdown(g, [done(1, ["holds", "unresolved"]), done(3, ["holds", "fails", "unresolved"])], [])
    assert "| 1 | done | 1/2 | 0.5 (holds) | 0.5 (unresolved) |  |" in text
    assert "| 3 | done | 1/3 | 0.5 (holds) | 0.5 (fails) | 0.5 (unresolved) |" in text


def _examples(text: str) -> list[list[str]]:
    """The `attnlab sweep ...` command lines of a text, continuation lines joined, comments dropped."""
    import shlex

    joined = text.replace("\\\n", " ")
    return [shlex.split(line.split("#")[0])[1:] for line in joined.splitlines()
            if line.strip().startswith("attnlab sweep")]


@pytest.mark.parametrize("where", ["--help", "docs/sweeps.md"])
def test_every_sweep_example_resolves_to_cells(where):
    """Each example of `attnlab sweep --help` and of docs/sweeps.md parses and every one of its cells resolves
    (as the command checks before starting Ray): a wrong key or value in an example fails here."""
    from pathlib import Path

    from attnlab.cli import build_parser
    from attnlab.experiments import runner
    from attnlab.experiments.config import parse_overrides
    from attnlab.sweep.cli import EPILOG

    text = EPILOG if where == "--help" else (Path(__file__).parents[2] / "docs" / "sweeps.md").read_text()
    examples = _examples(text)
    assert len(examples) >= 4
    for argv in examples:
        args = build_parser().parse_args(argv)
        exp = registry.get(args.name)
        g = make_grid(exp.name, exp.config_cls, args.grid, parse_overrides(args.overrides), args.seeds, args.quick)
        for cell in g.cells():
            runner.resolve_config(exp, cell.overrides, None, g.quick)


def test_the_kv_leaderboard_splits_into_cells_of_one_task_and_one_length_that_resolve():
    """The leaderboard's full table is slow on a CPU: a sweep runs it one (task, length) cell at a time, each a
    whole run (its full-cache control included), and a re-run resumes from the cells already done."""
    from attnlab.experiments import runner

    cells = grid("kv-leaderboard", ["tasks=niah_single;niah_multikey", "lengths=2048;4096"], {"n": "3"}).cells()
    assert len(cells) == 4
    cfgs = [runner.resolve_config(registry.get("kv-leaderboard"), c.overrides, None, False) for c in cells]
    assert {(c.tasks, c.lengths) for c in cfgs} == {((t,), (n,)) for t in ("niah_single", "niah_multikey")
                                                     for n in (2048, 4096)}
    assert all(c.n == 3 and len(c.policies) == 8 for c in cfgs)
