"""The predictors' learning curve: one row per rank and checkpoint, trained on growing chunks, scored on held-out
ids; bad checkpoints are one clear error."""
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.sparsity.curve import check_checkpoints, learning_curve
from tiny_models import tiny


def test_each_rank_learns_on_growing_chunks_and_is_scored_after_each():
    model = tiny("llama", 0, vocab_size=64)
    g = torch.Generator().manual_seed(0)
    train_ids, eval_ids = torch.randint(0, 64, (96,), generator=g), torch.randint(0, 64, (40,), generator=g)
    rows, final = learning_curve(model, "tiny", train_ids, eval_ids, (4, 8), (32, 96), keep=0.5, window=16,
                                 batch=8, epochs=2)
    assert [(r["rank"], r["tokens"], r["token_passes"]) for r in rows] == [(4, 32, 64), (4, 96, 192), (8, 32, 64),
                                                                          (8, 96, 192)]
    assert set(final) == {4, 8} and final[8].meta.r == 8
    for r in rows:
        assert 0 <= r["recall"] <= 1 and 0 < r["mass"] <= r["oracle_mass"] + 1e-6 <= 1 + 1e-6
        assert len(r["recall_per_layer"]) == model.config.num_hidden_layers
    # the second checkpoint's predictors kept training: they differ from fresh ones trained on the second chunk
    assert rows[0]["recall"] != rows[1]["recall"] or rows[0]["bce"] != rows[1]["bce"]


@pytest.mark.parametrize("checkpoints, available, says", [
    ((64, 32), 100, "increasing"),
    ((1,), 100, ">= 2"),
    ((), 100, "increasing"),
    ((32, 200), 100, "give 100"),
])
def test_bad_checkpoints_are_one_clear_error(checkpoints, available, says):
    with pytest.raises(ConfigError, match=says):
        check_checkpoints(checkpoints, available)


def test_the_chunks_mix_every_text_keeping_each_window_whole():
    from attnlab.sparsity.curve import mixed

    ids = torch.cat([torch.zeros(64, dtype=torch.long), torch.ones(64, dtype=torch.long), torch.tensor([7, 7])])
    out = mixed(ids, 16)
    assert sorted(out.tolist()) == sorted(ids.tolist()) and out[-2:].tolist() == [7, 7]  # a permutation, tail last
    windows = out[:128].view(8, 16)
    assert all(len(set(w.tolist())) == 1 for w in windows)  # whole windows, never cut
    assert set(out[:64].tolist()) == {0, 1}  # the first half already holds both "texts"
    assert torch.equal(out, mixed(ids, 16))  # seeded
