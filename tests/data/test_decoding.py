"""Text that does not decode is never taken silently: a binary file or one in another encoding is one line naming
how to give its encoding (``PATH:ENCODING``), a few stray bytes are counted on stderr, and the encoding named
after a path is honoured wherever a corpus is read."""
import pytest

from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.data.corpus import REPLACED_LIMIT, read_lines
from attnlab.data.sources import locate, read_corpus, split_encoding

LATIN = "Le cœur a ses raisons que la raison ne connaît point. Ça va, élève?\n" * 20


def test_a_file_in_another_encoding_is_refused_naming_the_share_and_the_fix(tmp_path):
    f, text = tmp_path / "fr.txt", LATIN.replace("œ", "oe")
    f.write_bytes(text.encode("latin-1"))
    with pytest.raises(UsageError) as e:
        read_corpus(str(f), "text", "--text-file PATH")
    line = str(e.value)
    assert str(f) in line and "are not utf-8" in line and f"--text-file {f}:latin-1" in line
    share = float(line.split(": ")[1].split("%")[0]) / 100
    assert share == pytest.approx(sum(c > "\x7f" for c in text) / len(text), rel=0.01)  # each accent one
    assert len(line.splitlines()) == 1


def test_the_encoding_named_after_the_path_reads_it(tmp_path):
    f = tmp_path / "fr.txt"
    f.write_bytes(LATIN.replace("œ", "oe").encode("latin-1"))
    lines = read_corpus(f"{f}:latin-1", "text")
    assert lines[0] == "Le coeur a ses raisons que la raison ne connaît point. Ça va, élève?"
    (tmp_path / "cp.txt").write_bytes(LATIN.encode("cp1252"))
    assert read_corpus(f"{tmp_path / 'cp.txt'}:cp1252", "text")[0].startswith("Le cœur")
    assert locate(f"{f}:latin-1", "text") == f  # the path alone: what compares texts, what finds them


def test_a_few_stray_bytes_are_replaced_and_counted_on_stderr(tmp_path, capsys):
    good = "plain ascii text on a line\n" * 400  # 10,800 characters: one bad byte is under the limit
    f = tmp_path / "t.txt"
    f.write_bytes(good.encode() + b"caf\xe9\n")
    assert 1 / len(good) < REPLACED_LIMIT
    lines = read_lines(f)
    assert lines[-1] == "caf\ufffd" and lines[0] == "plain ascii text on a line"
    err = capsys.readouterr().err
    assert f"{f}: 1 character(s)" in err and "read as U+FFFD" in err


def test_a_clean_file_says_nothing(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("é ü ñ and a U+FFFD of its own: \ufffd\n", encoding="utf-8")
    assert read_lines(tmp_path / "t.txt") == ["é ü ñ and a U+FFFD of its own: \ufffd"]
    assert capsys.readouterr().err == ""


def test_a_binary_file_is_refused(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 8)
    with pytest.raises(UsageError, match="model.bin: a binary file"):
        read_lines(f)
    (tmp_path / "ascii.txt").write_bytes(b"text with a NUL\x00 in it\n")  # decodes, and is still no text
    with pytest.raises(UsageError, match="a binary file"):
        read_lines(tmp_path / "ascii.txt")


def test_a_folder_names_its_file_that_does_not_decode(tmp_path):
    (tmp_path / "a.txt").write_text("fine\n")
    (tmp_path / "b.txt").write_bytes(LATIN.encode("cp1252"))
    with pytest.raises(UsageError, match="b.txt: .* are not utf-8"):
        read_corpus(str(tmp_path), "text")
    assert read_corpus(f"{tmp_path}:cp1252", "text")[0] == "fine"


def test_the_encoding_suffix_is_split_only_where_it_names_one(tmp_path):
    odd = tmp_path / "a:b.txt"  # a path that exists as written is never split
    odd.write_text("x\n")
    assert split_encoding(str(odd)) == (str(odd), "utf-8")
    assert split_encoding("kjv") == ("kjv", "utf-8") and split_encoding("kjv:latin-1") == ("kjv", "latin-1")
    assert split_encoding("wikitext-2/test.txt:UTF-16") == ("wikitext-2/test.txt", "UTF-16")
    (tmp_path / "notes.txt").write_text("x\n")
    for bad in ("latin-9000", "base64"):
        with pytest.raises(UsageError, match="is no text encoding; .* notes.txt:latin-1"):
            split_encoding(f"{tmp_path / 'notes.txt'}:{bad}")
    assert split_encoding("missing.txt:latin-9000") == ("missing.txt:latin-9000", "utf-8")  # not found, as ever
    with pytest.raises(UsageError, match="missing.txt:latin-9000: no such file"):
        locate("missing.txt:latin-9000", "text")


def test_commands_take_the_encoding_in_the_text_name(tmp_path, capsys):
    """Through a command: `attnlab view --text-file` refuses the latin-1 file in one line naming the fix, before
    the model loads."""
    f = tmp_path / "fr.txt"
    f.write_bytes(LATIN.encode("cp1252"))
    argv = ["view", "--model", str(tmp_path / "no-model"), "--text-file", str(f), "--out", str(tmp_path / "v.html")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--text-file {f}:latin-1" in err[0]
    assert main(argv[:4] + [f"{f}:cp1252"] + argv[5:]) == 2  # read now; then the missing model is the error
    err = capsys.readouterr().err
    assert "not utf-8" not in err and "no-model" in err
