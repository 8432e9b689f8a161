"""Corpora, the basic_english tokenizer and the vocabulary (own tiny text); attnlab.data stays light."""
import subprocess
import sys

import pytest

from attnlab.core.errors import UsageError
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


@pytest.mark.slow
def test_importing_attnlab_data_never_loads_the_hub_libraries(tmp_path):
    """Only an hf: spec imports attnlab.data.hub (and with it the datasets library)."""
    (tmp_path / "c.txt").write_text("some text\n")
    code = (f"import sys, attnlab.data, attnlab.data.corpus, attnlab.data.sources, attnlab.data.vocab\n"
            f"attnlab.data.sources.read_corpus({str(tmp_path / 'c.txt')!r}, 'train')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('datasets', 'transformers') "
            "or m == 'attnlab.data.hub'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_data_module_opens_with_a_one_line_summary():
    import importlib
    import pkgutil

    import attnlab.data

    for info in pkgutil.iter_modules(attnlab.data.__path__, "attnlab.data."):
        doc = importlib.import_module(info.name).__doc__
        lines = (doc or "").splitlines()
        assert lines and lines[0].endswith(".") and (len(lines) == 1 or not lines[1].strip()), info.name
