"""The sparsity measurements' running sums follow their input's device: fed the traced tensors of a real
model as tensors on the stand-in accelerator (tests/accelerator.py), they neither mix devices (which
stopped `attnlab sparsity` and `reproduce relu-control` on an H100) nor change a number."""
import pytest
import torch

from accelerator import accelerator, on_accel
from attnlab.sparsity import measure, similarity
from tiny_models import random_ids


def _moved(windows):
    """A traced_windows stand-in: the real windows' tensors, on the stand-in accelerator."""
    def traced(*args, **kwargs):
        for tr in windows(*args, **kwargs):
            yield {name: on_accel(t) for name, t in tr.acts.items()}
    return traced


@pytest.mark.parametrize("measurement", ["cosine", "overlap"])
def test_similarity_sums_follow_the_device(tiny_models, monkeypatch, measurement):
    model, ids = tiny_models["llama"], random_ids(96, seed=3)
    run = {"cosine": lambda: similarity.cross_layer_cosine(model, ids, window=32).layer,
           "overlap": lambda: similarity.consecutive_overlap(model, ids, 0.5, window=32)}[measurement]
    on_cpu = run()
    monkeypatch.setattr(similarity, "traced_windows", _moved(similarity.traced_windows))
    with accelerator():
        elsewhere = run()
    assert elsewhere.device == torch.device("cpu") and torch.equal(elsewhere, on_cpu)


def test_magnitude_histogram_follows_the_device():
    values = torch.randn(2, 500, generator=torch.Generator().manual_seed(0))
    hists = [measure.MagnitudeHistogram(2) for _ in range(2)]
    with accelerator():
        for wrap, hist in zip((lambda t: t, on_accel), hists):
            for layer in range(2):
                hist.add(layer, wrap(values[layer]))
        assert [h.threshold(1, 0.3) for h in hists][0] == hists[1].threshold(1, 0.3)
