"""The measurements of attnlab.sparsity.measure against hand computations on tiny random models."""
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.core.errors import ConfigError
from attnlab.models import arch
from attnlab.sparsity import measure
from attnlab.sparsity.rules import magnitude_threshold
from tiny_models import random_ids, save_hf, traced


@torch.no_grad()
def _nll(model, ids, scored):
    """NLL (len(scored),) of ids[t] given ids[:t] for t in ``scored`` (positions in this window), by hand."""
    logp = F.log_softmax(model(ids[None]).logits[0].double(), -1)  # (W, V)
    return torch.stack([-logp[t - 1, ids[t]] for t in scored])


def test_spans_score_every_token_once_and_windows_never_exceed_their_length():
    assert list(measure.spans(10, 4)) == [(0, 1, 4), (4, 5, 8), (8, 9, 10)]
    assert list(measure.spans(10, 4, 2)) == [(0, 1, 4), (2, 4, 6), (4, 6, 8), (6, 8, 10)]
    for n, w, s in [(50, 16, 16), (50, 16, 5), (7, 16, None), (33, 8, 8)]:
        spans = list(measure.spans(n, w, s))
        scored = [t for _, first, end in spans for t in range(first, end)]
        assert all(end - start <= w for start, _, end in spans)
        if s is not None and s < w:  # overlapping windows: every token but the first is scored exactly once
            assert scored == list(range(1, n))
        else:  # non-overlapping: each window's first token has no context and is not scored
            assert scored == [t for t in range(1, n) if t % w]


def test_perplexity_is_exp_mean_nll_by_hand(tiny_models):
    model, ids = tiny_models["llama"], random_ids(50)
    chunks = ids.split(16)  # non-overlapping windows of 16: score tokens 1.. of each
    by_hand = torch.cat([_nll(model, c, range(1, len(c))) for c in chunks])
    assert measure.perplexity(model, ids, window=16) == pytest.approx(math.exp(float(by_hand.mean())), rel=1e-5)
    whole = _nll(model, ids, range(1, 50))  # one window: the plain perplexity of the text
    assert measure.perplexity(model, ids, window=64) == pytest.approx(math.exp(float(whole.mean())), rel=1e-5)
    # strided: windows of 16 ending every 8 tokens score the tokens after the previous end
    strided = torch.cat([_nll(model, ids[0:16], range(1, 16))]
                        + [_nll(model, ids[e - 16:e], range(8, 16)) for e in (24, 32, 40, 48)]
                        + [_nll(model, ids[40:50], range(8, 10))])
    assert measure.perplexity(model, ids, window=16, stride=8) == pytest.approx(
        math.exp(float(strided.mean())), rel=1e-5)


@pytest.mark.parametrize("arch_name", ["llama", "gpt2", "opt"])
def test_calibrated_thresholds_keep_the_asked_share_of_calibration_entries(tiny_models, arch_name):
    model, ids, keep = tiny_models[arch_name], random_ids(96, 1), 0.3
    cats = measure.calibrate(model, ids, keep, "cats", window=32)
    teal_x, teal_h = measure.calibrate(model, ids, keep, "teal", window=32)
    n = arch.dims(model).n_layers
    assert set(cats) == set(teal_x) == set(teal_h) == set(range(n))
    xs = {i: [] for i in range(n)}
    hs = {i: [] for i in range(n)}
    for c in ids.split(32):
        tr = traced(model, c, ["blocks.*.mlp.in", "blocks.*.mlp.post"])
        for i in range(n):
            xs[i].append(tr[f"blocks.{i}.mlp.in"][0])
            hs[i].append(tr[f"blocks.{i}.mlp.post"][0])
    for i in range(n):
        x, h = torch.cat(xs[i]), torch.cat(hs[i])  # (96, d), (96, d_ff)
        m = arch.mlp(model, i)
        gate = m.act_fn((m.gate_proj or m.in_proj)(x)).detach()  # CATS's |act(gate(x))| (h itself when plain)
        for values, t in ((gate, cats[i]), (x, teal_x[i]), (h, teal_h[i])):
            assert float((values.abs() >= t).float().mean()) == pytest.approx(keep, abs=0.01)
            assert t == pytest.approx(magnitude_threshold(values, keep), rel=0.01)  # the exact quantile


def test_histogram_threshold_keeps_everything_when_the_crossing_is_among_zeros():
    hist = measure.MagnitudeHistogram(1)
    values = torch.cat([torch.zeros(900), torch.rand(100) + 0.5])  # a ReLU layer: 90% exact zeros
    hist.add(0, values)
    assert hist.threshold(0, 0.95) == 0.0
    t = hist.threshold(0, 0.05)
    assert float((values >= t).float().mean()) == pytest.approx(0.05, abs=0.002)


def test_static_sets_are_the_top_mean_abs_h_neurons(tiny_models):
    model, ids = tiny_models["gpt_neox"], random_ids(64, 2)
    sets = measure.static_sets(model, ids, 0.25, window=32)
    for i in range(arch.dims(model).n_layers):
        h = torch.cat([traced(model, c, f"blocks.{i}.mlp.post")[f"blocks.{i}.mlp.post"][0] for c in ids.split(32)])
        mean = h.abs().mean(0)  # (d_ff,)
        assert sets[i].tolist() == sorted(mean.topk(16).indices.tolist())  # 25% of 64 neurons



def test_load_texts_refuses_to_calibrate_on_the_evaluation_text_and_splits_the_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    model = save_hf(tmp_path / "m")
    (tmp_path / "test.txt").write_text("abcdefgh" * 10)
    (tmp_path / "a.txt").write_text("a" * 50)
    (tmp_path / "b.txt").write_text("b" * 50)
    with pytest.raises(ConfigError, match="is the evaluation text"):
        measure.load_texts(str(model), str(tmp_path / "test.txt"), 10, (str(tmp_path / "a.txt"),
                                                                         str(tmp_path / "test.txt")), 10)
    _, ids, calib = measure.load_texts(str(model), str(tmp_path / "test.txt"), 10,
                                       (str(tmp_path / "a.txt"), str(tmp_path / "b.txt")), 11)
    assert ids.shape == (10,) and calib.shape == (11,)
    assert len(set(calib[:6].tolist())) == 1 and len(set(calib[6:].tolist())) == 1  # 6 of a, 5 of b
    with pytest.raises(ConfigError, match="calibration text=.*has only 51 tokens"):  # 50 bytes and the line break
        measure.load_texts(str(model), str(tmp_path / "test.txt"), 10, (str(tmp_path / "a.txt"),), 60)


def test_layer_profile_reads_what_a_sparse_run_kept(tiny_models):
    from attnlab.sparsity.mlp import SparseMLP
    from attnlab.sparsity.record import SparsityRecord
    from attnlab.sparsity.rules import Oracle

    model, ids = tiny_models["llama"], random_ids(32, 5)
    record = SparsityRecord()
    with SparseMLP(model, Oracle(0.5), record=record):
        measure.perplexity(model, ids, window=32)
    p = measure.layer_profile(record)
    assert p["kept"] == [0.5, 0.5] and p["overall_kept"] == 0.5 and "x_kept" not in p
    h = traced(model, ids, "blocks.0.mlp.post")["blocks.0.mlp.post"][0].abs()  # layer 0 sees the dense input
    top = h.topk(32, dim=-1).values.sum()
    assert p["mass"][0] == pytest.approx(float(top / h.sum()), rel=1e-5)
    teal = measure.calibration(model, ids, "teal", window=32).rule(0.5)
    record = SparsityRecord()
    with SparseMLP(model, teal, record=record):
        measure.perplexity(model, ids, window=32)
    p = measure.layer_profile(record)
    assert len(p["x_kept"]) == 2 and p["overall_x_kept"] == pytest.approx(0.5, abs=0.03)
