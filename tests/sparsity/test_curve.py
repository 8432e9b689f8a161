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


def _rows(per_layer):
    """Curve rows at ranks 4, 16 and checkpoints 100, 200, 400 from per_layer(rank, tokens) -> (L,) recalls."""
    import numpy as np

    rows = []
    for rank in (4, 16):
        for tokens in (100, 200, 400):
            r = np.asarray(per_layer(rank, tokens), dtype=float)
            rows.append({"rank": rank, "tokens": tokens, "recall": float(r.mean()), "recall_per_layer": r.tolist(),
                         "mass": 0.5, "oracle_mass": 0.9})
    return rows


def test_the_slopes_are_the_least_squares_line_through_the_curve():
    import numpy as np

    from attnlab.sparsity.curve import slope_intervals, slopes

    # an exact plane in log2(tokens), log2(rank): the fit returns its slopes; every layer alike: a point interval
    rows = _rows(lambda r, t: [0.5 + 0.02 * np.log2(t) + 0.01 * np.log2(r)] * 5)
    assert slopes(rows) == pytest.approx({"tokens": 0.02, "rank": 0.01})
    assert all(lo == pytest.approx(hi) for lo, hi in slope_intervals(rows).values())
    # one rank: no rank slope is measured
    assert set(slopes([r for r in rows if r["rank"] == 4])) == {"tokens"}


def _curve_claims(per_layer, judge=True):
    from attnlab.sparsity.exp_dejavu_curve import DejaVuCurveConfig, _claims, _fit

    rows = _rows(per_layer)
    cfg = DejaVuCurveConfig(ranks=(4, 16), checkpoints=(100, 200, 400), judge=judge)
    return {c.claim.split(":")[0]: c for c in _claims(cfg, rows, _fit(rows)) if c.status != "finding"}


def test_the_slopes_interval_decides_more_tokens_do_not_help():
    """Layers that all rise: fails (with how far 0.9 is); layers that all fall: holds; layers that rise and fall
    around zero: unresolved. The decision is the interval's, never the point estimate's alone."""
    import numpy as np

    tokens = "the README's 'not predictable from x', (a) more tokens do not help"
    rising = _curve_claims(lambda r, t: 0.6 + 0.01 * np.log2(t) + np.linspace(0, 0.05, 8))[tokens]
    assert rising.status == "fails" and rising.interval[0] > 0 and rising.n == 8 and "doublings" in rising.note
    falling = _curve_claims(lambda r, t: 0.9 - 0.01 * np.log2(t) + np.linspace(0, 0.05, 8))[tokens]
    assert falling.status == "holds" and falling.interval[1] <= 0
    signs = np.array([1, -1] * 4)  # half the layers rise, half fall: a mean slope near 0, an interval across it
    mixed = _curve_claims(lambda r, t: 0.7 + 0.01 * signs * np.log2(t) + 0.001 * np.arange(8) * np.log2(t))[tokens]
    assert mixed.status == "unresolved" and mixed.holds is None and mixed.interval[0] < 0 < mixed.interval[1]
    assert mixed.note and mixed.method == "bootstrap over layers, 95%"


def test_the_quick_scale_decides_only_that_x_predicts_the_set():
    import numpy as np

    claims = _curve_claims(lambda r, t: 0.55 + 0.01 * np.log2(t) + np.linspace(0, 0.02, 8), judge=False)
    decided = [c for c in claims.values() if c.status in ("holds", "fails")]
    assert [c.claim.split(":")[0] for c in decided] == ["x predicts the set at all"] and decided[0].status == "holds"
    assert all(c.status == "unresolved" and "cannot decide" in c.note for c in claims.values() if c not in decided)
