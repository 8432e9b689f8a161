"""Evaluation inputs: a text's token ids keep its line breaks."""
import pytest

from attnlab.core.errors import ConfigError
from attnlab.evals.inputs import text_ids
from tiny_models import byte_tokenizer


def test_text_ids_keep_the_line_breaks_between_lines(tmp_path):
    path = tmp_path / "verses.txt"
    path.write_text("In the beginning\nGod created\n\nthe heaven\n")
    tok = byte_tokenizer()
    ids = text_ids(tok, str(path), 20)  # 17 bytes of the first line and its break, 3 of the next
    assert tok.decode(ids.tolist()) == "In the beginning\nGod", "lines must not run together"
    with pytest.raises(ConfigError, match="has only"):
        text_ids(tok, str(path), 500)
