"""similarity.py: cross-layer cosine and consecutive-token overlap, each by hand on tiny models, and
dense_stats as the three separate measurements in one pass."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.sparsity import measure, similarity
from attnlab.sparsity.rules import topk_mask
from tiny_models import random_ids, tiny, traced


def test_cross_layer_cosine_equals_the_trace_by_hand(tiny_models):
    model, ids = tiny("llama", 3, num_hidden_layers=4), random_ids(48, 3)
    cos = similarity.cross_layer_cosine(model, ids, window=24)
    per_chunk = []
    for c in ids.split(24):
        tr = traced(model, c, ["blocks.*.resid_pre", "blocks.*.resid_post"])
        per_chunk.append(torch.stack([F.cosine_similarity(tr[f"blocks.{i}.resid_pre"][0],
                                                          tr[f"blocks.{i}.resid_post"][0], dim=-1)
                                      for i in range(4)]))  # (4, 24)
        between = torch.stack([F.cosine_similarity(tr[f"blocks.{i}.resid_post"][0],
                                                   tr[f"blocks.{i + 1}.resid_post"][0], dim=-1) for i in range(3)])
        torch.testing.assert_close(between, per_chunk[-1][1:])  # layer i's input is layer i-1's output
    torch.testing.assert_close(cos.layer, torch.cat(per_chunk, 1).mean(1), atol=1e-5, rtol=0)
    assert cos.between.shape == (3,)


def test_consecutive_overlap_by_hand_and_at_its_extremes(tiny_models):
    model, ids = tiny_models["llama"], random_ids(40, 4)
    got = similarity.consecutive_overlap(model, ids, 0.5, window=20)
    shares = []
    for c in ids.split(20):
        tr = traced(model, c, "blocks.*.mlp.post")
        row = []
        for i in range(2):
            m = topk_mask(tr[f"blocks.{i}.mlp.post"][0].abs(), 0.5)  # (20, 64)
            row.append(torch.tensor([(m[t] & m[t + 1]).sum() / 32.0 for t in range(19)]))
        shares.append(torch.stack(row))  # (2, 19)
    torch.testing.assert_close(got, torch.cat(shares, 1).mean(1), atol=1e-6, rtol=0)
    assert torch.equal(similarity.consecutive_overlap(model, ids, 1.0, window=20), torch.ones(2))

@pytest.mark.parametrize("arch_name", ["llama", "gpt2"])
def test_dense_stats_is_the_three_separate_measurements_in_one_pass(tiny_models, arch_name):
    model, ids = tiny_models[arch_name], random_ids(49, 3)  # windows of 24: the last holds one token, scores none
    ppl, cos, overlap = similarity.dense_stats(model, ids, (0.5, 0.25), window=24)
    assert ppl == measure.perplexity(model, ids, window=24)
    assert torch.equal(cos.layer, similarity.cross_layer_cosine(model, ids, window=24).layer)
    assert set(overlap) == {0.5, 0.25}
    for keep, got in overlap.items():
        assert torch.equal(got, similarity.consecutive_overlap(model, ids, keep, window=24))
    assert not torch.equal(overlap[0.5], overlap[0.25])  # each keep its own sets
    with pytest.raises(ValueError, match="at least 2 tokens"):
        similarity.dense_stats(model, ids[:1], (0.5,), window=24)
