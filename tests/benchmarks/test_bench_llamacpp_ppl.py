"""benchmarks/bench_llamacpp_ppl.py without llama.cpp or SmolLM2: windows, scoring and rows against
quant-agreement's own protocol, and a missing GGUF refused in one line before any work."""
import math
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from attnlab.quant.experiments import predictions, windowed
from tiny_models import random_ids, tiny


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_llamacpp_ppl")


class Bar:
    def __init__(self):
        self.n = 0

    def update(self, k):
        self.n += k


def test_llamacpps_windows_and_scores_are_quant_agreements(bench, monkeypatch, tmp_path):
    """llama.cpp's side scored as attnlab's is: a stand-in Llama whose logits are a tiny model's gives the same
    positions, argmax and NLL as attnlab.quant.experiments.predictions on that model."""
    model, ids = tiny("llama"), random_ids(23, seed=4)

    class Llama:  # llama_cpp.Llama's surface the benchmark reads
        def __init__(self, path, n_ctx, logits_all, **kw):
            assert logits_all and n_ctx == 8
            self.scores = None

        def reset(self):
            self.scores = None

        def eval(self, tokens):
            with torch.no_grad():
                self.scores = model(torch.tensor([tokens])).logits[0].numpy()

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=Llama))
    bar = Bar()
    top, nll = bench.llamacpp_predictions(tmp_path / "x.gguf", ids, 8, bar)
    want_top, want_nll = predictions(model, ids, 8)
    assert torch.equal(top, want_top) and bar.n == ids.numel() == top.numel() + 3  # each window's first unscored
    torch.testing.assert_close(nll, want_nll)


def test_each_window_is_scored_by_the_cross_entropy_of_each_next_token():
    # the one loop both sides go through: windows of 8 from position 0, each window's first position unscored
    ids = torch.tensor([1, 4, 2, 9, 0, 3, 7, 5, 6, 2, 8, 1, 3])
    table = torch.randn(13, 11)  # a stand-in engine: position j of a window gets its own row of logits
    seen = []

    def logits_of(win):
        seen.append(win.numel())
        return table[:win.numel()] + win[:, None]

    top, nll = windowed(logits_of, ids, 8)
    assert seen == [8, 5]
    want = [F.cross_entropy(table[:n - 1] + w[:-1, None], w[1:], reduction="none").double()
            for w, n in ((ids[:8], 8), (ids[8:], 5))]
    torch.testing.assert_close(nll, torch.cat(want))
    want_top = [(table[:7] + ids[:7, None]).argmax(-1), (table[:4] + ids[8:12, None]).argmax(-1)]
    assert torch.equal(top, torch.cat(want_top))
    assert nll.dtype == torch.float64


def test_a_row_is_perplexity_against_the_reference(bench):
    top, ref = torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 4])
    nll = torch.full((4,), math.log(20.0), dtype=torch.float64)
    ref_nll = torch.full((4,), math.log(16.0), dtype=torch.float64)
    r = bench.row("x", top, nll, (ref, ref_nll), ids_len=6, window=3)  # windows [0:3], [3:6]: 2 positions each
    assert r["ppl"] == pytest.approx(20.0) and r["ppl_vs_float"] == pytest.approx(0.25)
    assert r["top1_agreement"] == 0.75 and r["positions"] == 4 and r["windows"] == 2
    assert r["ppl_vs_float_interval"] == pytest.approx((0.25, 0.25))  # every window the same change
    assert 0.5 <= r["top1_agreement_interval"][0] <= 0.75 <= r["top1_agreement_interval"][1] <= 1


def test_missing_ggufs_are_one_line_before_any_work(bench, monkeypatch, capsys, tmp_path):
    def started(*a, **k):
        raise AssertionError("the benchmark reached its work")

    monkeypatch.setattr(bench.torch, "set_num_threads", started)
    with pytest.raises(SystemExit) as e:
        bench.main(["--dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "F32.gguf" in err[0] and "gguf step" in err[0]
