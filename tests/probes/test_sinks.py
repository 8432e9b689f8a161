"""The sink probe: its shares equal a hand computation from the eager attention maps, on the four tiny
architectures; chance is what a uniform causal model gives; the claims and the position check."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.models.trace import Trace
from attnlab.probes.sinks import SinkProbe, chance_share, deep_share, position_check, position_claims
from attnlab.probes.stream import stream
from tiny_models import ARCHS, V, tiny

T, FIRST = 24, 4
TOL = dict(atol=1e-6, rtol=1e-5)  # streamed (KV cache) vs one forward: float32 rounding


def ids_of(seed=3, n=T):
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


def eager_maps(model, ids):
    """(L, H, T, T) attention probabilities of one full eager forward."""
    with Trace(model, "blocks.*.attn.pattern") as tr:
        model(ids[None])
    return torch.stack([tr[n][0] for n in tr.names]).double()


def probe_run(model, ids, chunk, **options):
    probe = SinkProbe(first=FIRST, **options)
    stream(model, ids, [probe], chunk=chunk)
    return probe.result()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("chunk", [3, 7, 64])  # 3: the excluded queries span two chunks
def test_shares_equal_a_hand_computation_from_the_eager_maps(tiny_models, arch, chunk):
    model, ids = tiny_models[arch], ids_of()
    a = eager_maps(model, ids)[:, :, FIRST:]  # (L, H, T - first, T): queries at positions >= first
    share, share_k = a[..., 0].mean(-1), a[..., :FIRST].sum(-1).mean(-1)  # (L, H)
    eps = float(share.flatten().sort().values[share.numel() // 2 - 1:share.numel() // 2 + 1].mean())  # a median
    m = probe_run(model, ids, chunk, eps=eps)
    torch.testing.assert_close(torch.tensor(m["first_token_share"], dtype=torch.float64), share, **TOL)
    torch.testing.assert_close(torch.tensor(m["first_k_share"], dtype=torch.float64), share_k, **TOL)
    rate = (share > eps).double()
    assert 0 < rate.mean() < 1  # eps between two heads' shares: the rate is not trivially 0 or 1
    assert m["sink_rate"] == pytest.approx(float(rate.mean()))
    assert m["sink_rate_per_layer"] == pytest.approx(rate.mean(1).tolist())
    assert m["queries"] == T - FIRST
    assert m["deep_first_token_share"] == pytest.approx(float(share.mean()), rel=1e-5)  # 2 layers: none >= 2


def test_a_uniform_causal_model_gives_the_chance_reference():
    model = tiny("llama")
    for i in range(model.config.num_hidden_layers):
        model.model.layers[i].self_attn.q_proj.weight.data.zero_()  # q = 0: every score 0, each row uniform
    m = probe_run(model, ids_of(), chunk=5)
    rows = torch.arange(FIRST, T, dtype=torch.float64) + 1
    assert m["chance_first_token_share"] == pytest.approx(float((1 / rows).mean()))
    assert (m["chance_first_token_share"], m["chance_first_k_share"]) == chance_share(FIRST, T)
    for layer, layer_k in zip(m["first_token_share"], m["first_k_share"]):
        assert layer == pytest.approx([m["chance_first_token_share"]] * len(layer))
        assert layer_k == pytest.approx([m["chance_first_k_share"]] * len(layer_k))
    assert m["sink_rate"] == 0.0


@pytest.mark.parametrize("rates, holds", [([0, 0, 0.75, 0.6, 0.2, 0.9], True), ([1, 1, 0.5, 0.25, 0.6, 0], False)])
def test_the_layer_claim_counts_layers_beyond_the_first_two(rates, holds):
    probe = SinkProbe()
    share = [[0.5] * 4 for _ in rates]
    m = {"sink_rate_per_layer": rates, "deep_first_token_share": 0.5, "chance_first_token_share": 0.01,
         "sink_rate": 0.5, "layer_first_k_share": [0.6] * len(rates), "chance_first_k_share": 0.04,
         "first_token_share": share}
    layers, chance = probe.claims(m)[:2]
    above = [r > 0.5 for r in rates[2:]]
    assert layers.measured == pytest.approx(sum(above) / len(above)) and layers.holds is holds
    assert chance.measured == pytest.approx(50) and chance.holds


def test_position_check_reruns_with_only_the_first_token_replaced(tiny_models):
    model, ids = tiny_models["llama"], ids_of()
    keep = ids.clone()
    probe = SinkProbe(first=FIRST)
    original = probe_run(model, ids, 8)
    replaced = position_check(model, ids, {"same": int(ids[0]), "other": int(ids[0] + 1) % V}, probe, chunk=8)
    assert torch.equal(ids, keep)
    share = {k: torch.tensor(m["first_token_share"]) for k, m in replaced.items()}
    assert torch.equal(share["same"], torch.tensor(original["first_token_share"]))
    swapped = ids.clone()
    swapped[0] = (ids[0] + 1) % V
    assert torch.equal(share["other"], torch.tensor(probe_run(model, swapped, 8)["first_token_share"]))
    assert not torch.equal(share["other"], share["same"])
    same, other = position_claims(original, replaced, probe)
    assert same.holds and same.measured == original["deep_first_token_share"]
    assert other.measured == replaced["other"]["deep_first_token_share"]
    assert other.holds == (abs(other.measured - same.measured) <= 0.2 * same.measured)


def test_a_text_no_longer_than_first_is_refused(tiny_models):
    with pytest.raises(UsageError, match="needs more than first=4"):
        stream(tiny_models["gpt2"], ids_of(n=FIRST), [SinkProbe(first=FIRST)])
    with pytest.raises(UsageError, match="eps"):
        SinkProbe(eps=1.5)


def test_the_deep_share_averages_the_heads_of_layers_from_from_layer():
    share = [[1.0, 1.0], [1.0, 1.0], [0.2, 0.4], [0.6, 0.8]]
    assert deep_share(share, 2) == pytest.approx(0.5)
    assert deep_share(share[:2], 2) == 1.0  # no layer beyond: all layers
