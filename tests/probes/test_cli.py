"""`attnlab probe` on a tiny model folder and a made-up text: the run contract, --help, and bad input
(one line, exit 2, nothing written)."""
import json

import pytest
import transformers

from attnlab.cli import main
from attnlab.probes.base import PROBES
from attnlab.probes.configs import ProbeRun
from attnlab.probes.run import load_probes
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
    # attnlab view's page of the same text, linked from the report
    assert "[attention view of the first 48 tokens (attnlab view)](view.html)" in report
    assert '"T":48' in (out / "view.html").read_text(encoding="utf-8")
    head, *lines = capsys.readouterr().out.strip().splitlines()  # what ran, then a line per claim
    assert head.startswith(f"{setup[0]} on the first 48 tokens") and "probes: sinks." in head
    assert lines == [f"[{c['status']}] {c['claim']}: {c['measured']:.4g}" for c in m["claims"]]
    assert all(f"- {line}" in report for line in lines)


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
    (["--probes", "sinks", "--option", "eps=0"], "sinks: eps=0.0: need eps in (0, 1)"),
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


@pytest.mark.parametrize("probe, option, says", [
    ("sinks", "eps=abc", "--option eps=abc: expected a value of type float"),
    ("sinks", "eps=none", "--option eps=none: expected a value of type float"),
    ("heavy-hitters", "heavy=abc", "--option heavy=abc: expected a value of type int"),
    ("massive-activations", "entries=abc", "--option entries=abc: expected a value of type int"),
    ("orthogonality", "baseline=-1", "orthogonality: baseline=-1: need baseline >= 2"),
    ("heavy-hitters", "heavy=0", "heavy-hitters: heavy=0: need heavy >= 1"),
    ("superposition", "neurons=-1", "superposition: neurons=-1: need neurons >= 1"),
    ("superposition", "window=0", "superposition: window=0: need window >= 1"),
    ("heavy-hitters", "recent=-1", "heavy-hitters: recent=-1: need recent >= 1"),
])
def test_a_bad_option_is_refused_before_any_model_is_loaded(tmp_path, capsys, probe, option, says):
    """Typed by the constructor's annotation, range-checked by the probe's bounds: one line, exit 2, and
    before the model is read (this one does not exist)."""
    out = tmp_path / "runs" / "run"
    assert main(["probe", "--model", str(tmp_path / "no-such-model"), "--probes", probe, "--option", option,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"attnlab: error: {says}"] and not (tmp_path / "runs").exists()


def test_flags_reach_the_config_by_name():
    """`attnlab probe`'s flags are ProbeRun's fields: the same config as `attnlab reproduce probe --set ...`."""
    from attnlab.cli import build_parser
    from attnlab.experiments.command import config_from_args
    from attnlab.experiments.config import resolve

    args = build_parser().parse_args(["probe", "--probes", "sinks,heavy-hitters", "--tokens", "300", "--chunk", "64",
                                      "--option", "shares=0.1,0.2", "--option", "first=2", "--out", "x"])
    cfg = config_from_args(ProbeRun, args)
    assert cfg == resolve(ProbeRun, {"probes": "sinks,heavy-hitters", "tokens": "300", "chunk": "64"},
                          {"options": ("shares=0.1,0.2", "first=2")})
    assert cfg.options == ("shares=0.1,0.2", "first=2") and cfg.probes == ("sinks", "heavy-hitters")
