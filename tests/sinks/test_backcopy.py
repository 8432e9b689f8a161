"""The Bigram-Backcopy data: every token after a trigger copies the one before it, the rest follows the chain,
and the Bayes floor is what the task's own predictor pays."""
import pytest
import torch

from attnlab.core.errors import ConfigError
from attnlab.sinks import backcopy


def _random_text(n: int = 20000, seed: int = 0) -> str:
    """A text drawn from a random bigram chain over 12 characters (every transition possible)."""
    g = torch.Generator().manual_seed(seed)
    chars = "abcdefghij .\n"
    rows = torch.rand(len(chars), len(chars), generator=g) + 0.05  # (V, V): every transition possible
    ids = [0]
    for _ in range(n - 1):
        ids.append(int(torch.multinomial(rows[ids[-1]], 1, generator=g)))
    return "".join(chars[i] for i in ids)


TEXT = _random_text()


@pytest.fixture(scope="module")
def task():
    return backcopy.from_text(TEXT, k=3)


def test_the_triggers_are_the_most_frequent_characters(task):
    counts = {c: TEXT.count(c) for c in set(TEXT)}
    top = sorted(counts.values(), reverse=True)[:3]
    assert sorted(counts[task.symbols[i]] for i in task.triggers.tolist()) == sorted(top)
    assert task.vocab_size == len(set(TEXT)) + 1 and task.bos == len(set(TEXT))


def test_every_token_after_a_trigger_copies_the_one_before_it(task):
    x = backcopy.sample(task, 64, 48, torch.Generator().manual_seed(0))
    assert (x[:, 0] == task.bos).all() and (x[:, 1:] != task.bos).all()
    assert not task.is_trigger(x[:, 1]).any()  # a copy always has a real token to copy
    trig = task.is_trigger(x[:, 1:-1])  # (B, L-2): position t = 1..L-2
    assert trig.float().mean() > 0.2  # the three commonest characters trigger often
    assert torch.equal(x[:, 2:][trig], x[:, :-2][trig])


def test_the_chain_moves_by_the_texts_bigram_frequencies(task):
    x = backcopy.sample(task, 400, 64, torch.Generator().manual_seed(1))
    cur, nxt = x[:, 1:-1], x[:, 2:]
    free = ~task.is_trigger(cur)  # transitions drawn from the chain, not copied
    v = task.n_symbols
    counts = torch.bincount(cur[free] * v + nxt[free], minlength=v * v).view(v, v).double()
    rows = counts.sum(1)
    busy = rows > 2000  # rows with enough draws for a 0.03 tolerance
    assert busy.sum() >= 3
    empirical = counts[busy] / rows[busy, None]
    assert (empirical - task.transition[busy]).abs().max() < 0.03


def test_the_bayes_floor_is_zero_after_triggers_and_the_row_entropy_elsewhere(task):
    x = backcopy.sample(task, 8, 32, torch.Generator().manual_seed(2))
    h = backcopy.bayes_nll(task, x)
    assert h.shape == (8, 31)
    trig = task.is_trigger(x[:, :-1])
    assert (h[trig] == 0).all() and (h[~trig] > 0).all()
    p = task.transition[x[0, 5]] if not trig[0, 5] else None
    if p is not None:
        torch.testing.assert_close(h[0, 5], -(p[p > 0] * p[p > 0].log()).sum())


@pytest.mark.parametrize("text, k, length, message", [
    ("abcabc", 0, 8, "at least one trigger"),
    ("abab", 3, 8, "too few"),
    (TEXT, 3, 2, "at least 3 tokens"),
])
def test_bad_input_is_one_clear_error(text, k, length, message):
    with pytest.raises(ConfigError, match=message):
        backcopy.sample(backcopy.from_text(text, k), 2, length, torch.Generator())
