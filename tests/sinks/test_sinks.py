"""Sinks from scratch: the sink table's scoring, a sink-token checkpoint's slot, the CLI and the quick
experiment on made-up text (the real run trains on ../shared/data, which CI does not need)."""
import json
import random

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.models.causal_lm import LlamaLMConfig, build_llama
from attnlab.sinks.table import sink_table
from tiny_models import byte_tokenizer

SINK = 299  # the tiny models' sink entry: the byte tokenizer's 256 bytes fit below it


def tiny_variant(attention: str):
    torch.manual_seed(0)
    return build_llama(LlamaLMConfig(300, 32, 2, 4, 2, 48, 64, attention=attention,
                                     sink_token_id=SINK if attention == "sink-token" else None)).eval()


def save_variant(folder, attention: str):
    """A tiny variant checkpoint folder with the byte tokenizer (a sink-token model's sink id is its own)."""
    tiny_variant(attention).hf.save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("attention", ["softmax", "sink-token"])
def test_sink_table_scores_the_same_targets_for_every_model(attention):
    model = tiny_variant(attention).hf
    ids = torch.randint(0, 256, (40,))
    table = sink_table(model, ids, window=8, sinks=(0, 1))
    assert set(table) == {0, 1} and all(len(x) == 39 and np.isfinite(x).all() for x in table.values())
    assert not np.allclose(table[0], table[1])  # the caches differ once the stream passes the window


def test_streaming_a_sink_token_model_without_its_slot_is_refused(tmp_path, capsys):
    folder = save_variant(tmp_path / "m", "sink-token")
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 20)
    args = ["stream", "--model", str(folder), "--text", str(tmp_path / "t.txt"), "--tokens", "60", "--budget", "16",
            "--out", str(tmp_path / "run")]
    capsys.readouterr()  # what saving the model printed (transformers' progress bar) is not the command's
    assert main([*args, "--policy", "window"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pre-trained with a sink token" in err[0] and "--n-sink 1" in err[0]
    assert not (tmp_path / "run").exists()
    assert main([*args, "--policy", "sinks", "--n-sink", "1", "--no-dense"]) == 0


@pytest.mark.slow
def test_sink_table_command(tmp_path, capsys):
    folder = save_variant(tmp_path / "m", "softmax1")
    (tmp_path / "t.txt").write_text("the cat sat on the mat. " * 20)
    out = tmp_path / "run"
    assert main(["sink-table", "--model", str(folder), "--text", str(tmp_path / "t.txt"), "--tokens", "60",
                 "--window", "16", "--sinks", "0,4", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["ppl"]) == {"0+16", "4+12"} and (out / "sink_table.png").stat().st_size > 0
    assert [ln.split(":")[0] for ln in capsys.readouterr().out.strip().splitlines()] == ["0+16", "4+12"]


@pytest.mark.parametrize("argv, says", [
    (["--sinks", "0,4", "--window", "4"], "--sinks 0,4 with --window 4: each must be >= 0 and below the window"),
    (["--sinks", "-1"], "--sinks -1 with --window 256"),
    (["--sinks", ""], "--sinks  with --window 256"),
    (["--sinks", "a"], "--sinks a: expected a value of type int"),
    (["--tokens", "256"], "--tokens 256 must exceed --window 256"),
])
def test_sink_table_bad_input_is_one_line_exit_2_before_any_model_is_loaded(tmp_path, capsys, argv, says):
    out = tmp_path / "runs" / "run"
    assert main(["sink-table", "--model", str(tmp_path / "no-such-model"), *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not (tmp_path / "runs").exists()


def _text(tmp_path, monkeypatch, seed: int, words: str, lines: int):
    """A made-up text of ``lines`` lines of 9 random ``words``, and the attnlab cache under tmp_path."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    rng = random.Random(seed)
    (tmp_path / "t.txt").write_text("\n".join(" ".join(rng.choices(words.split(), k=9)) for _ in range(lines)))
    return tmp_path / "run"


@pytest.mark.slow
def test_quick_experiment_trains_every_variant_and_streams_each(tmp_path, monkeypatch):
    out = _text(tmp_path, monkeypatch, 0, "the cat sat on a mat while dogs ran far away and birds sang in trees near "
                "old houses", 2500)
    assert main(["reproduce", "sink-pretraining", "--quick", "--set", f"text={tmp_path / 't.txt'}",
                 "--set", "steps=12", "--set", "track_every=5", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    variants = ["softmax", "softmax1", "sink-logit", "gated", "sink-token"]
    assert list(m["ppl"]) == variants and all(set(r) == {"0+32", "1+31", "2+30", "4+28"} for r in m["ppl"].values())
    assert all(np.isfinite(p) for r in m["ppl"].values() for p in r.values())
    learns, sink, *rest = m["claims"]  # the premises first; 12 steps grow no sink, so its claims are unresolved
    assert "learns the text" in learns["claim"] and sink["status"] in ("holds", "unresolved")
    about_sink = [c for c in rest if "sink token" not in c["claim"] and "sink-token" not in c["claim"]]
    assert len(about_sink) == 6 and (sink["status"] == "holds" or {c["status"] for c in about_sink} == {"unresolved"})
    for v in variants:  # one line per tracked step, the sink metrics on each
        lines = [json.loads(x) for x in (out / v / "metrics.jsonl").read_text().splitlines()]
        assert [x["step"] for x in lines] == [0, 5, 10, 12] and all(len(x["norm0_ratio"]) == 2 for x in lines)


def test_first_step_is_where_the_probe_sink_rate_first_reaches_the_threshold():
    from attnlab.sinks.exp_emergence import first_step

    lines = [{"step": s, "sink_rate": [r]} for s, r in ((0, 0.0), (50, 0.1), (100, 0.25), (150, 0.2))]
    assert first_step(lines, 0.2) == 100 and first_step(lines, 0.5) is None


@pytest.mark.slow
def test_quick_emergence_sweep_trains_one_vanilla_model_per_cell(tmp_path, monkeypatch):
    out = _text(tmp_path, monkeypatch, 1, "a river ran past the mill where old men sat and talked of rain and wheat",
                1500)
    assert main(["reproduce", "sink-emergence", "--quick", "--set", f"text={tmp_path / 't.txt'}", "--set", "steps=10",
                 "--set", "weight_decays=0.1,0.5", "--set", "workers=1", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert sorted(m["cells"]) == ["lr0.01-wd0.1", "lr0.01-wd0.5", "lr0.03-wd0.1", "lr0.03-wd0.5"]
    assert all(0 <= c["strongest_head"] <= 1 and len(c["sink_rate_held_out"]) == 10 for c in m["cells"].values())
    cfg = json.loads((out / "lr0.01-wd0.5" / "metrics.jsonl").read_text().splitlines()[-1])
    assert cfg["step"] == 10 and "sink_importance_max" in cfg
