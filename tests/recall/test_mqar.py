"""MQAR data: each query key's next token is the value it was paired with, the keys of a sequence are distinct,
the distances point at the pairs, and bad settings are one clear error."""
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.recall.mqar import MQAR, sample


def test_every_query_is_followed_by_its_pairs_value():
    task = MQAR(n_keys=20, n_values=10, n_filler=5, pairs=6, queries=4, gap=7)
    x, scored, distance = sample(task, 32, torch.Generator().manual_seed(0))
    assert x.shape == (32, task.length) and (x[:, 0] == task.bos).all()
    assert scored.sum(1).eq(4).all() and (distance[~scored] == 0).all()
    for row, s, d in zip(x, scored, distance):
        pairs = row[1:1 + 2 * task.pairs].view(-1, 2)  # (P, 2): key, value
        assert pairs[:, 0].unique().numel() == task.pairs and (pairs[:, 0] < task.n_keys).all()
        assert ((pairs[:, 1] >= task.n_keys) & (pairs[:, 1] < task.n_keys + task.n_values)).all()
        for t in s.nonzero()[:, 0].tolist():
            key, value = int(row[t]), int(row[t + 1])
            assert int(row[t - d[t]]) == key and int(row[t - d[t] + 1]) == value  # its pair, d back
    filler = x[:, 1 + 2 * task.pairs: 1 + 2 * task.pairs + task.gap]
    assert ((filler >= task.n_keys + task.n_values) & (filler < task.bos)).all()


def test_the_gap_moves_every_distance_by_itself():
    near, far = MQAR(gap=0), MQAR(gap=40)
    _, s1, d1 = sample(near, 8, torch.Generator().manual_seed(1))
    _, s2, d2 = sample(far, 8, torch.Generator().manual_seed(1))
    assert torch.equal(d2[s2], d1[s1] + 40)


@pytest.mark.parametrize("kwargs, says", [
    ({"pairs": 10, "n_keys": 8}, "pairs <= n_keys"),
    ({"queries": 0}, "queries >= 1"),
    ({"gap": -1}, "gap >= 0"),
])
def test_bad_settings_are_one_clear_error(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        MQAR(**kwargs)
