"""probes.massive: streamed max |h|, its position and channel, the top entries and the median equal a hand
computation from the full forward's traced resid_post, on the four tiny architectures."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.models.trace import Trace
from attnlab.probes.base import PROBES
from attnlab.probes.massive import WIDTH, MassiveActivationProbe, histogram_median
from attnlab.probes.stream import stream
from tiny_models import ARCHS, V

T = 40
TOL = 10 ** WIDTH - 1  # the histogram median is within half a bin of the exact one


def resid_post(model, ids):
    """[(T, d)] per layer: the full forward's residual stream leaving each layer."""
    with Trace(model, "blocks.*.resid_post") as tr:
        model(ids[None])
    return [tr[n][0] for n in tr.names]


@pytest.mark.parametrize("arch", ARCHS)
def test_streamed_top_entries_and_median_match_the_full_forward(tiny_models, arch):
    model = tiny_models[arch]
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(4))
    hs = resid_post(model, ids)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    probe = MassiveActivationProbe(entries=5)
    stream(model, ids, [probe], chunk=16)
    m = probe.result()
    for i, h in enumerate(hs):
        a = h.abs()  # (T, d)
        v, j = a.flatten().topk(5)
        d = a.shape[1]
        assert [e["position"] for e in m["top"][i]] == (j // d).tolist()
        assert [e["channel"] for e in m["top"][i]] == (j % d).tolist()
        assert [e["token"] for e in m["top"][i]] == ids[j // d].tolist()
        assert [e["value"] for e in m["top"][i]] == pytest.approx(v.tolist(), rel=1e-5)
        median = float(a.flatten().median())  # the lower median, as the probe's
        assert m["median"][i] == pytest.approx(median, rel=TOL)
        assert m["ratio"][i] == pytest.approx(float(v[0]) / median, rel=TOL)
    assert all(torch.equal(model.state_dict()[k], w) for k, w in weights.items())


def test_histogram_median_and_planted_massive_activation(tiny_models):
    values = torch.tensor([1e-3, 0.5, 2.0, 3.0, 7.0])
    counts = torch.zeros(3200, dtype=torch.long)
    counts.index_add_(0, ((values.log10() + 10) / WIDTH).floor().long(), torch.ones(5, dtype=torch.long))
    assert histogram_median(counts) == pytest.approx(2.0, rel=TOL)
    # a planted entry 1000x the rest, at position 21 (second chunk), channel 3 of layer 1
    probe = MassiveActivationProbe(entries=3, delimiters=(7,))
    ids = torch.arange(32) % 10
    probe.attach(tiny_models["gpt2"], ids)
    g = torch.Generator().manual_seed(0)
    for start in (0, 16):
        for layer in (0, 1):
            h = torch.randn(1, 16, 32, generator=g)
            if layer == 1 and start == 16:
                h[0, 5, 3] = -5000.0
            probe.see(f"blocks.{layer}.resid_post", h, start)
    m = probe.result()
    assert m["top"][1][0] == {"value": 5000.0, "position": 21, "token": 1, "channel": 3}
    assert m["ratio"][1] > 1000 > m["ratio"][0]
    claims = probe.claims(m)
    assert claims[0].measured == max(m["ratio"][0], m["ratio"][1])  # 2 layers: both are "middle"
    assert claims[1].holds is False  # position 21 holds token 1, not a delimiter (7)


def test_registered_and_bad_options():
    assert PROBES.get("massive-activations") is MassiveActivationProbe
    with pytest.raises(UsageError, match="entries=0"):
        MassiveActivationProbe(entries=0)


def test_figure(tiny_models, tmp_path):
    from attnlab.experiments.runner import RunContext

    probe = MassiveActivationProbe()
    stream(tiny_models["opt"], torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(5)), [probe], chunk=16)
    files = probe.figures(probe.result(), RunContext(out=tmp_path))
    assert list(files) == ["massive_activations.png"] and (tmp_path / "massive_activations.png").stat().st_size > 0
