"""LM batching: the tutorial's bptt streams, random windows, and the batchers the trainer uses."""
import pytest
import torch

from attnlab.core.errors import ConfigError, UsageError
from attnlab.train.batching import BATCHERS, BPTT, RandomWindows, batchify, bptt_batches, make_batcher, random_windows
from attnlab.train.trainer import TrainConfig


def test_batchify_and_bptt_cover_the_stream_once():
    ids = torch.arange(103)
    src = batchify(ids, 4)  # 25 rows x 4 streams, the 3-token tail dropped
    assert src.shape == (25, 4) and torch.equal(src[:, 1], torch.arange(25, 50))
    xs, ys = zip(*bptt_batches(src, 7))
    assert [x.shape for x in xs] == [(4, 7)] * 3 + [(4, 3)]
    for x, y in zip(xs, ys):
        assert torch.equal(y, x + 1)  # targets are the next token of each stream
    assert torch.equal(torch.cat(xs, 1)[1], torch.arange(25, 49))
    with pytest.raises(UsageError, match="bptt=30"):
        next(bptt_batches(src, 30))
    with pytest.raises(UsageError, match="streams"):
        batchify(torch.arange(5), 4)


def test_random_windows():
    ids = torch.arange(50)
    x, y = random_windows(ids, 8, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 10)
    assert torch.equal(y, x + 1) and torch.equal(x[:, 1:], x[:, :-1] + 1)
    with pytest.raises(UsageError, match="window length 50"):
        random_windows(ids, 2, 50, torch.Generator())


def test_batchers_by_name():
    assert BATCHERS.names() == ["bptt", "random"]
    assert make_batcher("bptt", 4, 7) == BPTT(4, 7) and make_batcher("random", 4, 7) == RandomWindows(4, 7)
    with pytest.raises(UsageError, match="did you mean 'random'"):
        make_batcher("randm", 4, 7)
    with pytest.raises(ConfigError, match="did you mean 'bptt'"):
        TrainConfig(batching="bpt")


def test_bptt_batcher_cycles_epochs_and_probes_the_first_rows():
    b = BPTT(batch_size=4, bptt=7)
    src = b.prepare(torch.arange(103), "training")  # (25, 4): 4 minibatches an epoch, the last of 3 steps
    epoch = list(bptt_batches(src, 7))
    gen = torch.Generator()
    for step in range(9):
        x, y = b.batch(src, step, gen)
        assert torch.equal(x, epoch[step % 4][0]) and torch.equal(y, epoch[step % 4][1])
    assert len(list(b.eval_batches(src, 0))) == 4 and len(list(b.eval_batches(src, 2))) == 2
    assert torch.equal(b.probe(src), epoch[0][0])  # (B, T): the first training batch
    with pytest.raises(UsageError, match="bptt=30 is longer than the validation data"):
        BPTT(4, 30).prepare(torch.arange(103), "validation")


def test_random_batcher_draws_from_the_given_generator_and_evaluates_on_fixed_windows():
    b = RandomWindows(batch_size=3, bptt=5)
    ids = b.prepare(torch.arange(40), "training")
    got = b.batch(ids, 0, torch.Generator().manual_seed(7))
    want = random_windows(ids, 3, 5, torch.Generator().manual_seed(7))
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    first, again = list(b.eval_batches(ids, 0)), list(b.eval_batches(ids, 0))
    assert len(first) == 50 and all(torch.equal(a[0], c[0]) for a, c in zip(first, again))
    assert len(list(b.eval_batches(ids, 3))) == 3
    assert torch.equal(b.probe(ids), torch.arange(5).view(1, 5))  # (1, T)
    with pytest.raises(UsageError, match="fewer than bptt\\+1=6"):
        b.prepare(torch.arange(5), "validation")


@pytest.mark.parametrize("name", ["bptt", "random"])
def test_training_chunks_do_not_all_start_with_one_token(name):
    """A stream with an end-of-text id between documents (as the corpora give): if every chunk began with
    it, it would become a sink by accident. The chunks must start all over the text."""
    eos, doc = 0, torch.arange(1, 40)
    ids = torch.cat([torch.cat([torch.tensor([eos]), doc]) for _ in range(30)])  # (1200,)
    batcher = make_batcher(name, 8, 16)
    src = batcher.prepare(ids, "training")
    gen = torch.Generator().manual_seed(0)
    firsts = torch.cat([batcher.batch(src, step, gen)[0][:, 0] for step in range(20)])  # (160,)
    assert (firsts == eos).float().mean() < 0.2 and firsts.unique().numel() > 10


def test_prepend_sink_puts_the_sink_first_and_predicts_the_first_token():
    from attnlab.train.batching import PrependSink

    batcher = PrependSink(make_batcher("bptt", 4, 6), 99)
    src = batcher.prepare(torch.arange(1, 60), "training")
    x, y = batcher.batch(src, 0, torch.Generator())
    inner_x, inner_y = BPTT(4, 6).batch(src, 0, torch.Generator())
    assert x.shape == y.shape == (4, 7) and (x[:, 0] == 99).all()
    assert torch.equal(x[:, 1:], inner_x) and torch.equal(y[:, 1:], inner_y) and torch.equal(y[:, 0], inner_x[:, 0])
    assert (batcher.probe(src)[:, 0] == 99).all()
    assert all((bx[:, 0] == 99).all() for bx, _ in batcher.eval_batches(src, 2))
