"""The texts that ship with attnlab: intact, unpacked once, and the last place a corpus name is looked up."""
import hashlib
import lzma

import pytest

from attnlab.core.errors import MissingResource
from attnlab.data import embedded
from attnlab.data.sources import CorpusNotFound, locate, read_corpus


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache, a working folder with no ./data and no ../shared/data, no $ATTNLAB_DATA."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNLAB_DATA", raising=False)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path / "cache"


def test_every_embedded_text_unpacks_to_its_checksum(cache):
    names = set(embedded.manifest())
    assert {"tinyshakespeare/input.txt", "kjv/kjv.txt", "war-and-peace/warpeace.txt", "wikitext-2/valid.txt",
            "wikitext-2/test.txt", "eval/copa.jsonl", "eval/lambada_openai.jsonl"} <= names
    assert not any(n.startswith("xsum") for n in names)  # research-use licence: never shipped
    for name, entry in embedded.manifest().items():
        raw = embedded.unpack(name).read_bytes()
        assert len(raw) == entry["bytes"] and hashlib.sha256(raw).hexdigest() == entry["sha256"], name
        assert entry["licence"] in (embedded.TEXTS / "NOTICE.md").read_text()
    assert not list(cache.rglob(".*tmp*"))  # written aside and renamed


def test_a_name_nowhere_else_is_found_among_the_embedded_texts(cache):
    assert locate("kjv/kjv.txt", "text") == cache / "texts" / "kjv" / "kjv.txt"
    assert locate("kjv", "text") == cache / "texts" / "kjv"  # a folder name, as in a data folder
    lines = read_corpus("wikitext-2/valid.txt", "text")
    assert lines[1].startswith(" = Homarus gammarus")
    with pytest.raises(CorpusNotFound, match="texts that ship with attnlab"):
        locate("kjv2", "text")
    with pytest.raises(CorpusNotFound):
        locate("xsum/xsum_0shot.jsonl", "data")  # research-use licence: never shipped


def test_precedence_user_path_then_attnlab_data_then_data_then_embedded(cache, tmp_path, monkeypatch):
    def text_at(root, body):
        (root / "kjv").mkdir(parents=True)
        (root / "kjv" / "kjv.txt").write_text(body)
        return root

    env, local = text_at(tmp_path / "env", "from $ATTNLAB_DATA\n"), text_at(tmp_path / "work" / "data", "./data\n")
    own = tmp_path / "mine.txt"
    own.write_text("the user's own\n")
    monkeypatch.setenv("ATTNLAB_DATA", str(env))
    assert read_corpus(str(own), "text") == ["the user's own"]
    assert read_corpus("kjv", "text") == ["from $ATTNLAB_DATA"]
    monkeypatch.delenv("ATTNLAB_DATA")
    assert read_corpus("kjv", "text") == ["./data"]
    (local / "kjv" / "kjv.txt").unlink()
    (local / "kjv").rmdir()
    assert read_corpus("kjv", "text")[0] == read_corpus("kjv/kjv.txt", "text")[0] != "./data"
    assert locate("kjv", "text") == cache / "texts" / "kjv"


def test_a_half_unpacked_text_is_unpacked_again(cache):
    target = embedded.unpack("tinyshakespeare/input.txt")
    good = target.read_bytes()
    target.write_bytes(good[:1000])  # e.g. a copy cut short by a full disk
    assert embedded.unpack("tinyshakespeare/input.txt").read_bytes() == good


def test_a_damaged_install_is_one_line_naming_the_fix(cache, tmp_path, monkeypatch):
    texts = tmp_path / "texts"
    (texts / "kjv").mkdir(parents=True)
    (texts / "kjv" / "kjv.txt.xz").write_bytes(lzma.compress(b"not the bible\n"))
    manifest = {"kjv/kjv.txt": dict(embedded.manifest()["kjv/kjv.txt"], bytes=14)}
    monkeypatch.setattr(embedded, "TEXTS", texts)
    monkeypatch.setattr(embedded, "manifest", lambda: manifest)
    with pytest.raises(MissingResource, match="damaged .* reinstall attnlab") as e:
        locate("kjv", "text")
    assert "\n" not in str(e.value)
    assert not (cache / "texts" / "kjv" / "kjv.txt").exists()
