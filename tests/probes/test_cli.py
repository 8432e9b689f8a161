"""`attnlab probe` on a tiny model folder and a made-up text: the run contract, --help, and bad input
(one line, exit 2, nothing written)."""
import json

import pytest
import transformers

from attnlab.cli import main
from attnlab.probes.base import PROBES
from attnlab.probes.cli import ProbeRun
from attnlab.probes.experiments import load_probes
from tiny_models import save_hf, texts_and_cache


@pytest.fixture
def setup(tmp_path, monkeypatch):
    text, _ = texts_and_cache(tmp_path, monkeypatch, repeat=6)
    return save_hf(tmp_path / "m"), text


def _argv(setup, out, *extra):
    model, text = setup
    return ["probe", "--model", str(model), "--text", str(text), "--tokens", "48", "--chunk", "16",
            "--out", str(out), *extra]


@pytest.mark.slow
def test_probe_writes_the_run_contract_and_prints_the_claims(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--probes", "sinks")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["experiment"] == "probe" and config["probes"] == ["sinks"] and config["tokens"] == 48
    m = json.loads((out / "metrics.json").read_text())
    assert m["probes"] == ["sinks"] and m["tokens"] == 48 and m["command"].startswith("attnlab probe --model")
    sinks = m["sinks"]
    assert [len(layer) for layer in sinks["first_token_share"]] == [4, 4]  # tiny llama: 2 layers x 4 heads
    assert sinks["queries"] == 48 - sinks["first"]
    assert len(m["claims"]) == 4 and all(c["claim"] for c in m["claims"])
    assert (out / "sinks_heads.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert m["command"] in report and "sinks_heads.png" in report
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(m["claims"]) and lines[0].startswith(f"[{m['claims'][0]['status']}]")


def test_no_probes_named_means_every_registered_probe():
    assert ProbeRun().probes == tuple(load_probes()) and "sinks" in ProbeRun().probes


def test_help_lists_every_registered_probe_with_its_summary(capsys):
    with pytest.raises(SystemExit) as done:
        main(["probe", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for name in load_probes():
        assert f"  {name}" in out and PROBES.get(name).summary in out


def _no_eager(self, *args, **kwargs):
    raise ValueError("this model does not support eager attention")


@pytest.mark.parametrize("extra, says", [
    (["--probes", "sinks,sink"], "did you mean 'sinks'"),
    (["--tokens", "5000"], "need tokens=5000"),
    (["--tokens", "1"], "--tokens 1"),
    (["--chunk", "0"], "--chunk 0"),
    (["--probes", "sinks", "eager"], "switching its"),
    (["--probes", "sinks", "--option", "layers=1"], "--option layers: no chosen probe (sinks) takes it"),
    (["--probes", "sinks", "--option", "eps"], "give key=value"),
    (["--probes", "superposition", "--option", "layers=0,9"], "out of range"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(setup, tmp_path, capsys, monkeypatch, extra, says):
    if extra[-1] == "eager":  # a model whose attention cannot be read
        monkeypatch.setattr(transformers.PreTrainedModel, "set_attn_implementation", _no_eager)
        extra = extra[:-1]
    out = tmp_path / "runs" / "run"
    assert main(_argv(setup, out, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "runs").exists()
    if says == "switching its":
        assert "'eager'" in err[0] and "failed" in err[0]


@pytest.mark.slow
def test_an_option_reaches_the_probe_that_takes_it(setup, tmp_path):
    out = tmp_path / "run"
    assert main(_argv(setup, out, "--probes", "sinks,superposition", "--option", "first=2", "--option",
                      "layers=1")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["sinks"]["first"] == 2 and m["superposition"]["layers"] == [1]
    assert json.loads((out / "config.json").read_text())["options"] == ["first=2", "layers=1"]
