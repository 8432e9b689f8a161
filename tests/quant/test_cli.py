"""--quant through the commands, and ``attnlab reproduce quant-agreement``, on a tiny model folder."""
import json

import pytest
import torch

from attnlab.cli import main
from attnlab.quant.schemes import SCHEMES, Scheme
from tiny_models import save_hf, texts_and_cache


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, _ = texts_and_cache(tmp_path, monkeypatch, repeat=40)
    return save_hf(tmp_path / "m"), text


def test_quant_agreement_states_its_claims_and_measures_them(setup, tmp_path):
    model, text = setup
    out = tmp_path / "run"
    assert main(["reproduce", "quant-agreement", "--out", str(out), "--set", f"model={model}",
                 "--set", f"text={text}", "--set", "tokens=256", "--set", "window=64"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["positions"] == 4 * 63
    assert 0 <= m["top1_agreement"] <= 1 and m["quant_bytes"] < m["float_bytes"] / 3
    claims = {c["test"]: c for c in m["claims"] if c["status"] != "finding"}
    assert claims["at_least"]["expected"] == 0.99 and claims["at_least"]["measured"] == m["top1_agreement"]
    assert claims["abs"]["tolerance"] == 0.01
    assert claims["abs"]["measured"] == pytest.approx(m["ppl_quant"] / m["ppl_float"] - 1)
    for c in claims.values():  # each decided by its interval over the 4 windows, which holds what was measured
        assert c["n"] == 4 and c["interval"][0] <= c["measured"] <= c["interval"][1]


def test_a_calibrated_scheme_reads_its_calibration_text_not_the_scored_one(setup, tmp_path):
    model, text = setup
    out = tmp_path / "run"
    calib = tmp_path / "other.txt"
    assert main(["reproduce", "quant-agreement", "--out", str(out), "--set", f"model={model}",
                 "--set", f"text={text}", "--set", "tokens=128", "--set", "window=64", "--set", "scheme=smoothquant",
                 "--set", f"calibration={calib}", "--set", "calibration_tokens=32"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["calibration"] == {"text": str(calib), "tokens": 32} and m["scheme"] == "smoothquant"


def test_the_windows_sums_and_their_intervals():
    from attnlab.quant.experiments import per_window, window_intervals

    # 10 ids in windows of 4: windows [0:4], [4:8], [8:10] score 3, 3 and 1 positions
    agree = torch.tensor([1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    nll_q, nll_f = torch.arange(7.0), torch.zeros(7)
    w = per_window(10, 4, agree, nll_q, nll_f)
    assert w.tolist() == [[2, 3, 0, 3], [3, 12, 0, 3], [0, 6, 0, 1]]
    share, ratio, n = window_intervals(10, 4, agree, nll_q, nll_f)
    assert n == 3 and share[0] <= 5 / 7 <= share[1] and 0 <= share[0] <= share[1] <= 1
    same = window_intervals(10, 4, agree, nll_f, nll_f)[1]
    assert same == (0.0, 0.0)  # the same scores on every resample: no change, no spread


def test_stream_runs_every_cache_on_int8_weights(setup, tmp_path):
    model, text = setup
    runs = {}
    for quant in ("", "int8"):
        out = tmp_path / f"run{quant}"
        assert main(["stream", "--model", str(model), "--text", str(text), "--tokens", "64", "--policy", "sinks",
                     "--budget", "16", "--n-sink", "2", "--out", str(out)] + (["--quant", quant] if quant else [])) == 0
        runs[quant] = json.loads((out / "metrics.json").read_text())
    assert "int8" in runs["int8"]["methods"] and "int8" not in runs[""]["methods"]  # --quant int8 is --method int8
    for name, r in runs["int8"]["runs"].items():  # int8 moved the PPL, a little
        assert r["ppl"] != runs[""]["runs"][name]["ppl"]
        assert r["ppl"] == pytest.approx(runs[""]["runs"][name]["ppl"], rel=0.05)


@pytest.mark.parametrize("command", ["stream", "sparsity", "eval"])
def test_an_unknown_scheme_is_one_line_exit_2_before_any_work(setup, tmp_path, capsys, command):
    out = tmp_path / "run"
    assert main([command, "--quant", "int3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown weight quantization 'int3': did you mean 'int8'" in err[0]
    assert not out.exists()


def test_a_scheme_registered_in_one_place_reaches_help_validation_and_the_transform(setup, tmp_path, capsys,
                                                                                      monkeypatch):
    class Rounded:  # fp16-rounded weights: a scheme no paper proposes, registered only by this test
        def __init__(self, w, bias):
            self.w, self.bias = w, bias

        def __call__(self, x):
            return torch.nn.functional.linear(x, self.w.float(), self.bias)

    last = SCHEMES.names()[-1]  # the registered schemes' list ends with the last one found
    monkeypatch.setitem(SCHEMES._items, "fp16-test", Scheme(lambda w: w.half(), "fp16-rounded weights", Rounded))
    with pytest.raises(SystemExit):
        main(["stream", "--help"])
    assert f"{last}, fp16-test" in " ".join(capsys.readouterr().out.split())
    model, text = setup
    out = tmp_path / "run"
    assert main(["stream", "--model", str(model), "--text", str(text), "--tokens", "32", "--policy", "full",
                 "--quant", "fp16-test", "--out", str(out)]) == 0
    assert "fp16-test" in json.loads((out / "metrics.json").read_text())["methods"]
    assert "--quant fp16-test is --method fp16-test" in capsys.readouterr().err  # the new spelling, said
    assert SCHEMES.names()[-1] == "fp16-test"


def test_a_missing_calibration_text_is_one_line_naming_its_own_setting(setup, tmp_path, capsys):
    model, text = setup
    out = tmp_path / "run"
    rc = main(["reproduce", "quant-agreement", "--out", str(out), "--set", f"model={model}", "--set", f"text={text}",
               "--set", "tokens=128", "--set", "window=64", "--set", "scheme=smoothquant",
               "--set", f"calibration={tmp_path / 'nope.txt'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--set calibration=PATH" in err[0] and not out.exists()
