"""Corpora, the basic_english tokenizer, the vocabulary and LM batching (own tiny text)."""
import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.train.batching import batchify, bptt_batches, random_windows
from attnlab.data.corpus import read_lines
from attnlab.data.vocab import UNK, Vocab, basic_english


def test_basic_english_rules():
    assert basic_english('He said: "Don\'t (ever) stop!" Really? Yes; 3.5, ok<br />end') == [
        "he", "said", "don", "'", "t", "(", "ever", ")", "stop", "!", "really", "?", "yes", "3", ".", "5", ",",
        "ok", "end"]
    assert basic_english("  A  B\tC\n") == ["a", "b", "c"]
    assert basic_english("") == []


def test_wikitext_line_keeps_unk_and_at_markers():
    assert basic_english(" = Valkyria Chronicles = \n") == ["=", "valkyria", "chronicles", "="]
    assert basic_english("the <unk> @-@ based") == ["the", "<unk>", "@-@", "based"]


def test_vocab_order_unk_and_limit():
    lines = [["b", "a", "b"], ["c", "b", "a", UNK]]
    v = Vocab.build(lines)
    assert v.itos == (UNK, "b", "a", "c")  # by frequency, ties by first appearance
    assert v.encode(["a", "zzz", UNK]) == [2, 0, 0]
    assert v.decode([1, 3]) == ["b", "c"]
    assert Vocab.build(lines, max_size=2).itos == (UNK, "b")
    assert len(Vocab.build(lines, min_freq=2)) == 3
    with pytest.raises(UsageError, match="vocabulary limit 0"):
        Vocab.build(lines, max_size=0)


def test_numericalize_concatenates_lines():
    v = Vocab.build([basic_english("the cat. the dog")])
    ids = v.numericalize(["the cat", "", "a dog."])
    assert v.decode(ids.tolist()) == ["the", "cat", UNK, "dog", "."]


def test_read_lines_file_folder_and_errors(tmp_path):
    (tmp_path / "b.txt").write_text("second\n")
    (tmp_path / "a.txt").write_text("first\nline two\n")
    (tmp_path / "skip.md").write_text("not text\n")
    assert read_lines(tmp_path) == ["first", "line two", "second"]  # sorted, *.txt only
    assert read_lines(tmp_path / "a.txt") == ["first", "line two"]
    with pytest.raises(UsageError, match="no such file"):
        read_lines(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(UsageError, match="empty"):
        read_lines(tmp_path / "empty.txt")
    (tmp_path / "sub").mkdir()
    with pytest.raises(UsageError, match="no \\*.txt files"):
        read_lines(tmp_path / "sub")


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
