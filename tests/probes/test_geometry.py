"""The geometry probes against hand computations from traced activations and eager attention maps."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.core.errors import UsageError
from attnlab.core.metrics import attention_entropy
from attnlab.probes.base import PROBES
from attnlab.probes.geometry import OrthogonalityProbe, SimilarityProbe, random_mean_abs_cos
from attnlab.probes.stream import stream
from tiny_models import random_ids, traced


class _Ctx:
    def __init__(self, out):
        self.out = out

    def savefig(self, fig, name):
        fig.savefig(self.out / name)
        return name


@pytest.mark.parametrize("arch_name", ["llama", "gpt2"])
def test_similarity_equals_the_trace_and_core_entropy_by_hand(tiny_models, arch_name, tmp_path):
    model, ids = tiny_models[arch_name], random_ids(40, 1)
    impl, params = model.config._attn_implementation, [p.clone() for p in model.parameters()]
    probe = SimilarityProbe()
    stream(model, ids, [probe], chunk=16)  # chunks of 16, 16, 8 with the cache
    m = probe.result()
    assert model.config._attn_implementation == impl  # the model is unchanged after the stream
    assert all(torch.equal(p, q) for p, q in zip(params, model.parameters()))
    tr = traced(model, ids, ["blocks.*.resid_pre", "blocks.*.resid_post", "blocks.*.attn.pattern"])
    for i in range(2):
        cos = F.cosine_similarity(tr[f"blocks.{i}.resid_pre"][0], tr[f"blocks.{i}.resid_post"][0], dim=-1)  # (40,)
        assert m["cosine"][i] == pytest.approx(float(cos.mean()), abs=1e-5)
        ent = attention_entropy(tr[f"blocks.{i}.attn.pattern"][0].double())  # (H, 40) eager rows of the whole text
        assert m["entropy"][i] == pytest.approx(float(ent.mean()), abs=1e-5)
        norm = ent[:, 1:] / torch.arange(2, 41).double().log()  # row q has q + 1 keys; row 0 has no normalised value
        assert m["entropy_normalised"][i] == pytest.approx(float(norm.mean()), abs=1e-5)
        heads = torch.tensor(m["entropy_normalised_heads"][i])  # (H,)
        torch.testing.assert_close(heads, norm.mean(1).float(), atol=1e-5, rtol=0)
    assert m["between"] == m["cosine"][1:] and m["tokens"] == 40
    json.dumps(m, allow_nan=False)
    assert [c.status for c in probe.claims(m)][1] == "finding"
    assert (tmp_path / next(iter(probe.figures(m, _Ctx(tmp_path))))).exists()


def test_orthogonality_cosines_equal_a_hand_computation_on_the_sampled_pairs(tiny_models, tmp_path):
    model = tiny_models["llama"]
    ids = random_ids(48, 2)
    ids[5:9] = 7  # repeated tokens: their pairs must never be sampled
    probe = OrthogonalityProbe(pairs=8, max_pairs=20, baseline=512)
    stream(model, ids, [probe], chunk=16)
    m = probe.result()
    pairs = torch.cat(probe.pairs)  # (N, 2) absolute positions
    assert [len(p) for p in probe.pairs] == [8, 8, 4] and m["pairs"] == 20  # bounded: max_pairs in all
    assert (pairs > 0).all() and (pairs[:, 0] != pairs[:, 1]).all()  # never the sink, never a token with itself
    assert (ids[pairs[:, 0]] != ids[pairs[:, 1]]).all()  # distinct tokens
    assert (pairs[:, 0] // 16 == pairs[:, 1] // 16).all()  # both in one chunk
    tr = traced(model, ids, ["embed", "blocks.*.resid_post"])
    assert m["layers"] == ["embed", "blocks.0.resid_post", "blocks.1.resid_post"]
    q = torch.tensor(m["quantiles"])
    for j, name in enumerate(m["layers"]):
        x = tr[name][0].double()  # (48, d)
        cos = F.cosine_similarity(x[pairs[:, 0]], x[pairs[:, 1]], dim=-1).float()  # (20,)
        assert m["mean_abs_cos"][j] == pytest.approx(float(cos.abs().mean()), abs=1e-5)
        assert m["mean_cos"][j] == pytest.approx(float(cos.mean()), abs=1e-5)
        torch.testing.assert_close(torch.tensor(m["quantiles_cos"][j]), torch.quantile(cos, q), atol=1e-5, rtol=0)
        assert m["ratio"][j] == pytest.approx(m["mean_abs_cos"][j] / m["random"]["mean_abs_cos"])
        assert m["orthogonal"][j] == (m["ratio"][j] <= 2.0)
        centred = torch.cat([x[1:16] - x[1:16].mean(0), x[16:32] - x[16:32].mean(0), x[32:] - x[32:].mean(0)])
        centred = torch.cat([x[:1], centred])  # (48, d): each chunk minus its mean (chunk 0 without the sink)
        cos = F.cosine_similarity(centred[pairs[:, 0]], centred[pairs[:, 1]], dim=-1).float()  # (20,)
        assert m["mean_abs_cos_centred"][j] == pytest.approx(float(cos.abs().mean()), abs=1e-5)
    json.dumps(m, allow_nan=False)
    claims = probe.claims(m)
    assert claims[0].measured == pytest.approx(m["ratio"][0]) and claims[0].holds == m["orthogonal"][0]
    assert (tmp_path / next(iter(probe.figures(m, _Ctx(tmp_path))))).exists()


@pytest.mark.parametrize("d", [32, 576])
def test_random_baseline_cosines_have_spread_one_over_sqrt_d(d):
    assert random_mean_abs_cos(d) == pytest.approx(math.sqrt(2 / (math.pi * d)), rel=0.05)  # large-d limit
    probe = OrthogonalityProbe(baseline=4096)
    probe.d = d
    cos = probe.random_cosines()
    assert cos.shape == (4096,)
    assert float(cos.std()) == pytest.approx(1 / math.sqrt(d), rel=0.05)  # Var cos = 1/d exactly
    assert float(cos.abs().mean()) == pytest.approx(random_mean_abs_cos(d), rel=0.05)
    assert torch.equal(cos, probe.random_cosines())  # seeded


def test_geometry_probes_are_registered_and_refuse_a_too_short_text(tiny_models):
    assert PROBES.get("similarity") is SimilarityProbe and PROBES.get("orthogonality") is OrthogonalityProbe
    with pytest.raises(UsageError, match="at least 3 tokens"):
        stream(tiny_models["llama"], random_ids(2), [OrthogonalityProbe()])
