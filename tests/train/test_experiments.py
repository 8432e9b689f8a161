"""scansnap-fig7 end to end on a tiny made-up corpus; the demo skips it where no corpus exists."""
import json

import pytest

from attnlab import cli


def _corpus(tmp_path):
    words = "the cat sat on the mat . a dog ran to the park , and the cat saw the dog ."
    (tmp_path / "train.txt").write_text("\n".join(words for _ in range(120)))
    (tmp_path / "valid.txt").write_text("\n".join(words for _ in range(60)))
    return [f"train={tmp_path / 'train.txt'}", f"valid={tmp_path / 'valid.txt'}"]


@pytest.mark.slow
def test_fig7_runs_on_a_tiny_corpus(tmp_path, capsys):
    sets = _corpus(tmp_path) + ["layers=1,2", "steps=6", "snapshot_steps=0,3,6", "track_every=3", "eval_batches=2"]
    argv = ["reproduce", "scansnap-fig7", "--out", str(tmp_path / "run")]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(m["claims"]) == 2 and set(m["runs"]) == {"1", "2"}
    lines = [json.loads(x) for x in (tmp_path / "run" / "layers2" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 3, 6] and len(lines[0]["entropy"]) == 2
    assert (tmp_path / "run" / "fig7.png").is_file()
    assert not (tmp_path / "run" / "layers1" / "checkpoint.pt").exists()


@pytest.mark.parametrize("extra,fragment", [
    (["train=nowhere.txt"], "train=nowhere.txt: no such file"),
    (["max_vocab=-1"], "max_vocab"),
    (["layers=0"], "layers"),
])
def test_fig7_bad_input(tmp_path, capsys, monkeypatch, extra, fragment):
    monkeypatch.chdir(tmp_path)
    argv = ["reproduce", "scansnap-fig7", "--out", "run"]
    for s in _corpus(tmp_path) + extra:
        argv += ["--set", s]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]
    assert not (tmp_path / "run").exists()


def test_fig7_bptt_longer_than_the_data(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("one two three four five six seven eight nine ten\n" * 30)
    argv = ["reproduce", "scansnap-fig7", "--out", str(tmp_path / "run"), "--set", f"train={tmp_path / 't.txt'}",
            "--set", f"valid={tmp_path / 't.txt'}", "--set", "steps=2", "--set", "snapshot_steps=0"]
    assert cli.main(argv) == 2
    assert "bptt=35 is longer" in capsys.readouterr().err


def test_demo_skips_a_real_text_experiment_without_its_corpus(tmp_path, capsys, monkeypatch):
    """Where the corpus is nowhere -- not given, no data folder, and (as in a build without them) no embedded
    texts -- the demo skips the experiment, naming the setting."""
    from attnlab.data import sources

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNLAB_DATA", raising=False)
    monkeypatch.setattr(sources, "embedded", lambda spec: None)
    from attnlab.experiments import demo

    monkeypatch.setattr(demo, "DEMO_EXPERIMENTS", ("scansnap-fig7",))
    assert cli.main(["demo", "--jobs", "1", "--out", "demo"]) == 0
    report = (tmp_path / "demo" / "report.md").read_text()
    assert "scansnap-fig7: skipped" in report and "--set train=PATH" in report
    assert not (tmp_path / "demo" / "scansnap-fig7").exists()


@pytest.mark.slow
def test_joma_wikitext_runs_on_a_tiny_corpus(tmp_path):
    argv = ["reproduce", "joma-wikitext", "--out", str(tmp_path / "run")]
    for s in _corpus(tmp_path) + ["layers=1,2", "steps=8", "track_every=2", "eval_every=4", "eval_batches=2"]:
        argv += ["--set", s]
    assert cli.main(argv) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # drop + recovery per depth, then the two across-depth comparisons
    assert len(m["claims"]) == 2 * 2 + 2
    assert [len(m["runs"][d]["layers"]) for d in ("1", "2")] == [1, 2]
    run = m["runs"]["2"]
    for c in run["layers"]:
        assert c["min"] <= min(c["start"], c["final"]) and 0 <= c["min_step"] <= 8
    lines = [json.loads(x) for x in (tmp_path / "run" / "layers2" / "metrics.jsonl").read_text().splitlines()]
    assert run["best_valid_loss"] == min(x["valid_loss"] for x in lines if "valid_loss" in x)
    assert (tmp_path / "run" / "joma_wikitext.png").is_file()
    # a failing claim names the end stretch's spread and trend, and the experiment that says how long it needs
    for c in m["claims"][1:4:2] + m["claims"][-2:-1]:  # the recovery claims and the last-layer ordering
        assert ("joma_wikitext_readings.py" in c.get("note", "")) == (c["status"] == "fails"), c
    assert set(run["late"]) == {"mean", "sd", "slope_per_1000"} and run["late"]["sd"] >= 0


@pytest.mark.slow
def test_a_reading_equals_the_shorter_run(tmp_path):
    """readings=4 of an 8-step run is what a 4-step run measures: the lr is constant, so a prefix is that run."""
    def run(name, *extra):
        argv = ["reproduce", "joma-wikitext", "--out", str(tmp_path / name)]
        for s in _corpus(tmp_path) + ["layers=2", "track_every=2", "eval_every=4", "eval_batches=2", *extra]:
            argv += ["--set", s]
        assert cli.main(argv) == 0
        return json.loads((tmp_path / name / "metrics.json").read_text())["runs"]["2"]

    long, short = run("long", "steps=8", "readings=4,8"), run("short", "steps=4")
    assert long["by_step"]["4"] == {**short["layers"][0], "last_layer": short["layers"][-1]["final"]}
    assert {k: v for k, v in long["by_step"]["8"].items() if k != "last_layer"} == long["layers"][0]


def test_curve_shape_measures_drop_and_recovery():
    import numpy as np

    from attnlab.train.exp_joma_text import curve_shape

    shape = curve_shape(np.array([0, 10, 20, 30]), np.array([2.0, 1.0, 1.2, 1.5]))
    assert shape == {"start": 2.0, "min": 1.0, "min_step": 10, "final": 1.5, "recovered": 0.5}


def test_readings_are_the_curve_cut_at_each_step():
    import numpy as np

    from attnlab.train.exp_joma_text import curve_shape, first_reaching, readings_at

    steps = np.array([0, 10, 20, 30, 40])
    h = np.array([[2.0, 3.0], [1.0, 2.5], [1.1, 2.4], [1.5, 2.6], [1.9, 2.2]])  # (points, layers)
    by = readings_at(steps, h, (20, 40))
    assert by["20"] == {**curve_shape(steps[:3], h[:3, 0]), "last_layer": 2.4}
    assert by["40"]["recovered"] == curve_shape(steps, h[:, 0])["recovered"]  # the whole run: the final shape
    assert first_reaching(by, 0.5) == 40 and first_reaching(by, 0.05) == 20 and first_reaching(by, 0.95) is None
    over = {"10": {"recovered": 1.2}, "20": {"recovered": 0.3}}  # more than the whole drop regained: not the claim
    assert first_reaching(over, 0.1) == 20


def test_late_recovery_measures_the_end_stretch():
    import numpy as np

    from attnlab.train.exp_joma_text import curve_shape, late_recovery

    steps = np.arange(0, 70, 10)
    h = np.array([2.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5])  # rising 0.1 (a tenth of the drop) every 10 steps
    late = late_recovery(steps, h, curve_shape(steps, h), span=30)  # steps 40, 50, 60
    assert late["mean"] == pytest.approx(0.4) and late["sd"] == pytest.approx(np.std([0.3, 0.4, 0.5]))
    assert late["slope_per_1000"] == pytest.approx(10.0)  # 0.1 per 10 steps
    assert np.isnan(late_recovery(steps, h, curve_shape(steps, h), span=20)["slope_per_1000"])  # 2 points


def test_readings_outside_the_run_are_refused():
    from attnlab.core.errors import ConfigError
    from attnlab.train.exp_joma_text import JomaTextConfig

    with pytest.raises(ConfigError, match="readings"):
        JomaTextConfig(steps=3000, readings=(3000, 6000))
    with pytest.raises(ConfigError, match="multiples"):
        JomaTextConfig(steps=3000, track_every=50, readings=(1025,))
