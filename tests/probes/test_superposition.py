"""The superposition probe: running top-k against the traced activations, and a neuron built to fire on
two unrelated planted token patterns found with both contexts and two clusters."""
import json

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.probes.base import PROBES
from attnlab.probes.stream import stream
from attnlab.probes.superposition import SuperpositionProbe, clusters, context_similarity, spread_layers
from tiny_models import tiny

A, B, NEURON = (40, 41, 42), (50, 51, 52), 5  # two motifs; the neuron fires on their last tokens


def _planted_model():
    """A tiny llama whose layer-0 MLP neuron NEURON is positive exactly on tokens 42 and 52: their
    embeddings are orthonormal directions u_A, u_B that every other token lacks; every other token shares
    u_C, which the neuron's gate reads negatively (so it is negative there); layer 0's attention adds 0."""
    model = tiny("llama", 4)
    with torch.no_grad():
        emb = arch.embeddings(model).tokens.weight  # (V, d)
        u = torch.linalg.qr(torch.randn(emb.shape[1], 3, generator=torch.Generator().manual_seed(0)))[0].T  # (3, d)
        size = emb.norm(dim=1).mean()
        others = [v for v in range(emb.shape[0]) if v not in (A[-1], B[-1])]
        emb[others] -= emb[others] @ u.T @ u  # no component on u_A, u_B, u_C ...
        emb[others] += emb[others].norm(dim=1, keepdim=True) * u[2]  # ... then an equal one on u_C
        emb[A[-1]], emb[B[-1]] = size * u[0], size * u[1]
        arch.attention(model, 0).o.weight.zero_()  # the MLP's input is the (normed) token embedding
        model.model.layers[0].post_attention_layernorm.weight.fill_(1.0)
        mlp = arch.mlp(model, 0)
        mlp.gate_proj.weight[NEURON] = u[0] + u[1] - u[2]
        mlp.in_proj.weight[NEURON] = u[0] + u[1] + u[2]  # the "up" half
    return model


def _planted_text(n=640, every=40):
    """Background tokens 0..39 with motif A or B (alternating) planted every ``every`` tokens: 8 of each."""
    ids = torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(1))
    at = list(range(20, n - 3, every))
    for j, p in enumerate(at):
        ids[p:p + 3] = torch.tensor(A if j % 2 == 0 else B)
    return ids, [p + 2 for p in at]  # the firing positions


def test_context_similarity_and_clusters_by_hand():
    ids = torch.tensor([1, 2, 3, 1, 2, 3, 4, 5, 6])
    idf = torch.ones(7, dtype=torch.float64)
    sim = context_similarity(ids, torch.tensor([2, 5, 8]), 2, idf)  # contexts (1 2 3), (1 2 3), (4 5 6)
    torch.testing.assert_close(sim, torch.tensor([[1.0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.float64))
    # token at distance r weighted 1 / (1 + r): (1 2 3) vs (3 0 0) share only the firing token 3; 0 appears twice
    idf = torch.ones(4, dtype=torch.float64)
    sim = context_similarity(torch.tensor([1, 2, 3, 0, 0, 3]), torch.tensor([2, 5]), 2, idf)
    assert float(sim[0, 1]) == pytest.approx(1 / ((1 + 1 / 4 + 1 / 9) * (1 + (1 / 2 + 1 / 3) ** 2)) ** 0.5)
    link = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    link[2, 3] = link[3, 2] = True
    link[0, 1] = link[1, 0] = False
    assert clusters(link) == [[2, 3], [0], [1]]


def test_running_top_k_equals_the_traced_activations(tiny_models):
    model = tiny_models["gpt_neox"]
    ids = torch.randint(0, 64, (50,), generator=torch.Generator().manual_seed(3))
    probe = SuperpositionProbe(layers=[1], top=5)
    stream(model, ids, [probe], chunk=16)
    with Trace(model, "blocks.1.mlp.post") as tr:
        model(ids[None])
    h = tr["blocks.1.mlp.post"][0][1:]  # (49, d_ff): position 0 left out
    best = h.topk(5, dim=0)
    torch.testing.assert_close(probe.values[1], best.values, atol=1e-5, rtol=0)
    assert torch.equal(probe.positions[1], best.indices + 1)
    assert probe.needs == ("blocks.1.mlp.post",)


def test_the_neuron_built_for_two_unrelated_patterns_shows_both_contexts_in_two_clusters(tmp_path):
    model = _planted_model()
    ids, firing = _planted_text()
    probe = SuperpositionProbe(layers=[0], neurons=64, top=20, decode=lambda t: " ".join(map(str, t)) + " ")
    stream(model, ids, [probe], chunk=128)
    live = probe.values[0][:, NEURON] > 0
    assert sorted(probe.positions[0][live, NEURON].tolist()) == firing  # all 16 planted contexts, nothing else
    m = probe.result()
    layer = m["per_layer"][0]
    ex = next(e for e in layer["examples"] if e["neuron"] == NEURON)
    assert ex["clusters"] == 2 and ex["sizes"] == [8, 8]
    assert {c["token"] for c in ex["contexts"]} == {A[-1], B[-1]}
    for c in ex["contexts"]:
        motif = A if c["token"] == A[-1] else B
        assert c["before"][-2:] == list(motif[:2]) and f"[[{motif[-1]} ]]" in c["text"]
    assert layer["clusters_hist"][2] >= 1 and 0 < layer["polysemantic_share"] <= 1
    json.dumps(m, allow_nan=False)
    assert probe.claims(m)[0].status == "finding"

    class Ctx:
        def savefig(self, fig, name):
            fig.savefig(tmp_path / name)
            return name

    caption = probe.figures(m, Ctx())["superposition.png"]
    assert (tmp_path / "superposition.png").exists() and "neuron" in caption


def test_layers_default_spread_and_bad_layers_or_text_are_one_line_errors(tiny_models):
    assert spread_layers(30) == [7, 14, 22] and spread_layers(2) == [0, 1]
    assert PROBES.get("superposition") is SuperpositionProbe
    model = tiny_models["llama"]
    with pytest.raises(UsageError, match="out of range"):
        stream(model, torch.arange(10), [SuperpositionProbe(layers=[5])])
    with pytest.raises(UsageError, match="at least 2 tokens"):
        stream(model, torch.arange(1), [SuperpositionProbe()])
