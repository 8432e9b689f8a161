"""benchmarks/joma_wikitext_readings.py: runs of one seed and depth compose only where the longer repeats the
shorter exactly; otherwise one line, exit code 2, nothing written."""
import json
import sys

import numpy as np
import pytest

from attnlab.train.exp_joma_text import first_reaching, readings_at

# layer-0 entropy falls to 1.0 at step 20, then regains a tenth of the drop every 20 steps; the last layer rises
STEPS = np.arange(0, 90, 10)
H = np.stack([[2.0, 1.5, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3], np.linspace(2.0, 2.4, 9)], axis=1)  # (points, 2)


def write_run(folder, steps, *, seed=0, shift=0.0, lr=1e-4):
    """A joma-wikitext result folder of a 2-layer run read every 20 steps up to ``steps``."""
    keep = STEPS <= steps
    s, h = STEPS[keep], H[keep] + shift
    by = readings_at(s, h, tuple(range(20, steps + 1, 20)))
    (folder / "layers2").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"experiment": "joma-wikitext", "seed": seed, "lr": lr,
                                                    "steps": steps, "recovery_fraction": 0.1}))
    (folder / "metrics.json").write_text(json.dumps(
        {"runs": {"2": {"by_step": by, "recovery_reached_at": first_reaching(by, 0.1)}}}))
    (folder / "layers2" / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": int(t), "entropy": [[float(x)] for x in row],
                              "valid_loss": 5 + (t - 40) ** 2 / 1e3}) for t, row in zip(s, h)))  # lowest at 40
    return folder


def run_script(load_benchmark, monkeypatch, *argv):
    readings = load_benchmark("joma_wikitext_readings")
    monkeypatch.setattr(sys, "argv", ["joma_wikitext_readings.py", *map(str, argv)])
    readings.main()


def test_a_longer_run_that_repeats_the_shorter_replaces_it(load_benchmark, monkeypatch, tmp_path, capsys):
    short, long = write_run(tmp_path / "short", 40), write_run(tmp_path / "long", 80)
    run_script(load_benchmark, monkeypatch, short, long, "--out", tmp_path / "out")
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    [line] = result["replaced"]
    assert f"{long} (to 80) replaces {short} (to 40), whose 2 readings" in line
    cell = result["cells"]["seed0-2L"]
    assert cell["last_reading"] == 80 and cell["min_step"] == 20
    assert cell["first_meeting_claim"] == 40  # 0.0 of the drop regained at 20, 0.1 at 40
    assert cell["valid"] == {"lowest": 5.0, "at": 40, "last": 6.6}
    assert result["by_reading"]["80"]["recovered_mean"]["2"] == pytest.approx(0.3)
    assert "| 0 | 2 |" in capsys.readouterr().out


def test_a_longer_run_rounded_differently_replaces_the_shorter_and_says_how_far_they_agree(
        load_benchmark, monkeypatch, tmp_path):
    short, long = write_run(tmp_path / "short", 40), write_run(tmp_path / "long", 80, shift=2e-7)  # another CPU
    run_script(load_benchmark, monkeypatch, short, long, "--out", tmp_path / "out")
    [line] = json.loads((tmp_path / "out" / "result.json").read_text())["replaced"]
    assert f"{long} (to 80) replaces {short} (to 40)" in line and "not bit for bit" in line
    assert "from step 0 on (its entropies differ by up to 2e-07 nats: one init" in line


@pytest.mark.parametrize("other, why", [
    (dict(steps=80, shift=0.01), "they start from different models"),  # not the shorter run carried on
    (dict(steps=80, lr=1e-3), "their settings differ beyond length (['lr'])"),
    (dict(steps=40), "neither extends the other"),                       # the same run given twice
])
def test_runs_of_one_seed_and_depth_that_do_not_compose_are_refused(load_benchmark, monkeypatch, tmp_path, capsys,
                                                                      other, why):
    first, second = write_run(tmp_path / "a", 40), write_run(tmp_path / "b", **other)
    with pytest.raises(SystemExit) as stop:
        run_script(load_benchmark, monkeypatch, first, second, "--out", tmp_path / "out")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and why in err
    assert not (tmp_path / "out").exists()


def test_a_run_without_its_curves_is_refused(load_benchmark, monkeypatch, tmp_path, capsys):
    run = write_run(tmp_path / "a", 40)
    (run / "layers2" / "metrics.jsonl").unlink()
    with pytest.raises(SystemExit) as stop:
        run_script(load_benchmark, monkeypatch, run, "--out", tmp_path / "out")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "no layers2/metrics.jsonl" in err
    assert not (tmp_path / "out").exists()


def test_other_seeds_are_read_beside(load_benchmark, monkeypatch, tmp_path):
    runs = [write_run(tmp_path / "s0", 80), write_run(tmp_path / "s1", 40, seed=1)]
    run_script(load_benchmark, monkeypatch, *runs, "--out", tmp_path / "out")
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["replaced"] == [] and set(result["cells"]) == {"seed0-2L", "seed1-2L"}
    assert result["by_reading"]["20"]["seeds_meeting"]["2"] == "0/2"  # at its minimum: nothing regained yet
    assert result["by_reading"]["40"]["seeds_meeting"]["2"] == "2/2"  # 10%: the claim's lower bound
    assert result["by_reading"]["80"]["seeds_meeting"]["2"] == "1/1"  # only seed 0 was read at 80
