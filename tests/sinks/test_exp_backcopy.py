"""``attnlab reproduce sink-backcopy`` at a test's size: every run trains and is tracked, the claims are computed
from the tracks, bad input is one line and exit 2, and the BB model measures what the docstring says."""
import json
import math
import re
import types

import pytest
import torch

from attnlab.cli import main
from attnlab.sinks import backcopy, bb_train

TINY = ["--set", "length=12", "--set", "d_model=16", "--set", "d_ffn=32", "--set", "batch=8", "--set", "steps=6",
        "--set", "track_every=3", "--set", "probe_batch=4", "--set", "window=8", "--set", "stream_tokens=24",
        "--set", "workers=1", "--set", "deep_layers=2", "--set", "main_steps=9", "--set", "text_steps=3"]


def test_a_tiny_run_tracks_every_run_and_checks_its_claims(tmp_path):
    out = tmp_path / "bb"
    assert main(["reproduce", "sink-backcopy", *TINY, "--set", "interventions=relu,sgd,sink-token",
                 "--set", "sgd_lrs=0.03,0.1", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert list(m["runs"]) == ["1-layer", "2-layer", "relu", "sgd-lr0.03", "sgd-lr0.1", "sink-token"]
    assert [r["lr"] for r in m["sgd_sweep"]] == [0.03, 0.1] and m["sgd_lr"] in (0.03, 0.1)
    assert [r["decides"] for r in m["sgd_sweep"]] == [lr == m["sgd_lr"] for lr in (0.03, 0.1)]
    assert list(m["interventions"]) == ["relu", "sgd", "sink-token"]
    assert m["interventions"]["sgd"]["run"] == f"sgd-lr{m['sgd_lr']:g}"
    sgd_end = m["runs"][m["interventions"]["sgd"]["run"]]["track"][-1]["layers"][0]
    assert m["interventions"]["sgd"]["dormant"] == sgd_end["dormant"]
    assert [m["runs"][f"sgd-lr{lr:g}"]["lr"] for lr in (0.03, 0.1)] == [0.03, 0.1]
    for name, run in m["runs"].items():  # the 1-layer model trains on into the stable phase (main_steps)
        assert [t["step"] for t in run["track"]] == ([0, 3, 6, 9] if name == "1-layer" else [0, 3, 6])
        assert len(run["track"][-1]["layers"]) == run["layers"]
        for layer in run["track"][-1]["layers"]:
            assert 0 <= layer["dormant"] <= 1 and layer["value_ratio"] > 0 and layer["resid_ratio"] > 0
    assert m["runs"]["relu"]["track"][-1]["layers"][0]["logit_gap"] is None
    assert set(m["stream"]) == {"0+8", "1+7", "4+4"} and set(m["then_text"]["stream"]) == {"0+8", "1+7", "4+4"}
    assert [t["step"] for t in m["then_text"]["track"]] == [0, 3]  # the BB model, then 3 steps of text
    claims = {c["claim"].split(":")[0]: c for c in m["claims"]}
    assert {"a sink emerges", "residual-state peak", "evicting the sink hurts", "ReLU attention removes the sink",
            "SGD instead of Adam removes the sink", "SGD instead of Adam removes the value drain",
            "sink-token, the residual peak"} <= set(claims)
    assert all(c["status"] in ("holds", "fails", "unresolved", "finding") for c in m["claims"])
    for c in m["claims"]:  # an intervention below competence (after 6 steps, likely every one) decides nothing
        if " removes the " in c["claim"] and float(re.search(r"copy share ([\d.]+)", c["claim"])[1]) < 0.895:
            assert c["status"] == "unresolved" and "did not learn the task" in c["note"]
    if claims["a sink emerges"]["status"] != "holds":  # every other claim is about the sink: none decided
        assert {c["status"] for c in m["claims"][1:]} <= {"unresolved", "finding"}
    assert (out / "backcopy_dynamics.png").exists() and (out / "backcopy_map.png").exists()


@pytest.mark.parametrize("setting, says", [
    ("k=0", "at least one trigger"),
    ("k=80", "too few"),
    ("length=2", "at least 3 tokens"),
    ("window=12", "4 < window < length"),
    ("interventions=dropout", "interventions"),
    ("sgd_lrs=0.1,-1", "SGD rates"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, setting, says):
    assert main(["reproduce", "sink-backcopy", *TINY, "--set", setting, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_the_dormant_and_active_measures_read_the_heads_attention_to_bos():
    """A model whose one head is set by hand: every query puts all its attention on the first key (BOS)."""
    task = backcopy.from_text("abcabd acd bca dcab " * 50, k=1)
    cfg = types.SimpleNamespace(seed=0, d_model=8, d_ffn=16, length=10)
    model = bb_train.build(task, cfg, 1, "softmax")
    attn = model.hf.model.layers[0].self_attn
    with torch.no_grad():  # BOS alone on embedding dim 0, the rest on dim 1 (RMSNorm keeps directions)
        emb = model.hf.model.embed_tokens.weight
        emb.zero_()
        emb[:, 1] = 1.0
        emb[task.bos] = 0.0
        emb[task.bos, 0] = 1.0
        attn.q_proj.weight.zero_()
        attn.k_proj.weight.zero_()
        # RoPE's slowest pair (dims 3 and 7 of 8) barely turns over 10 positions: a position-free logit
        attn.q_proj.weight[3, :2] = 1.0  # every query
        attn.k_proj.weight[3, 0] = 300.0  # BOS's key alone
    x = backcopy.sample(task, 4, 10, torch.Generator().manual_seed(0))
    layer = bb_train.measure(model, task, x)["layers"][0]
    assert layer["dormant"] > 0.99 and layer["active"] > 0.99 and layer["copy"] < 0.01
    assert layer["logit_gap"] > 5 and not math.isnan(layer["value_ratio"])
