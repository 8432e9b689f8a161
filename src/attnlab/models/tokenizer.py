"""Tokenizers for the training lab, all as Hugging Face fast tokenizers.

One type serves every model: it encodes a list of lines into one id stream for the trainer,
and saves as ``tokenizer.json`` + ``tokenizer_config.json``, so a checkpoint folder written
with it loads with ``AutoTokenizer.from_pretrained``.

- ``word``: the ``basic_english`` scheme and frequency-ordered vocabulary of
  :mod:`attnlab.data.vocab`, expressed as a normalizer pipeline + WordLevel model (a test shows
  the ids equal :meth:`Vocab.numericalize` exactly).
- ``bpe``: byte-level BPE (GPT-2's pre-tokenization, no unknown tokens) trained on the training
  lines with the ``tokenizers`` library; cached by a hash of the text and the vocabulary size.
- a folder path: any saved Hugging Face tokenizer.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterable

import tokenizers
import torch
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from attnlab.core.cache import cache_dir
from attnlab.core.errors import UsageError, first_line
from attnlab.data.vocab import BASIC_ENGLISH_RULES, UNK, Vocab, basic_english

EOS = "<|endoftext|>"
SINK = "<|sink|>"  # the learnable sink token of a sink-token model: a vocabulary entry of its own


class LabTokenizer:
    """A fast tokenizer plus how lines become one stream: word-level drops line breaks (the
    tutorial's numericalisation), byte-level keeps each line's ``\\n`` so generated text has lines."""

    def __init__(self, fast: PreTrainedTokenizerFast, keeps_newlines: bool):
        self.fast, self.keeps_newlines = fast, keeps_newlines

    @property
    def vocab_size(self) -> int:
        return len(self.fast)

    @property
    def eos_id(self) -> int | None:
        return self.fast.eos_token_id

    @property
    def sink_id(self) -> int | None:
        """The sink token's id, once :meth:`add_sink` has added it (a saved tokenizer keeps it)."""
        return self.fast.convert_tokens_to_ids(SINK) if SINK in self.fast.get_vocab() else None

    def add_sink(self) -> int:
        """Add the sink token as a new special entry (idempotent) -> its id, the last of the vocabulary."""
        if self.sink_id is None:
            self.fast.add_special_tokens({"additional_special_tokens": [SINK]})
        return self.sink_id

    def encode_lines(self, lines: Iterable[str]) -> torch.Tensor:
        """All lines' ids, concatenated -> (N,) long."""
        batch = [line + "\n" for line in lines] if self.keeps_newlines else list(lines)
        if not batch:  # the fast tokenizer fails on an empty batch; no lines are no ids
            return torch.zeros(0, dtype=torch.long)
        ids = self.fast(batch, add_special_tokens=False)["input_ids"]
        return torch.tensor([i for row in ids for i in row], dtype=torch.long)

    def decode(self, ids) -> str:
        return self.fast.decode(ids)

    def save(self, folder: str | Path) -> None:
        self.fast.save_pretrained(str(folder))


def word_tokenizer(vocab: Vocab) -> LabTokenizer:
    """The basic_english scheme over ``vocab`` as an HF tokenizer (``<unk>`` for unseen words)."""
    tok = tokenizers.Tokenizer(models.WordLevel(vocab=vocab.stoi, unk_token=UNK))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Lowercase()] + [normalizers.Replace(Regex(p.pattern), r) for p, r in BASIC_ENGLISH_RULES])
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # tokens joined by spaces
    return LabTokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK), keeps_newlines=False)


def train_bpe(lines: list[str], vocab_size: int, cache: Path | None = None) -> LabTokenizer:
    """Byte-level BPE with ``vocab_size`` tokens (256 bytes + merges + EOS), trained once per text."""
    if vocab_size < 257:
        raise UsageError(f"BPE vocabulary {vocab_size}: use at least 257 (256 bytes + end-of-text)")
    h = hashlib.sha256(f"bpe|{vocab_size}|{tokenizers.__version__}|".encode())
    for line in lines:
        h.update(line.encode("utf-8", "replace") + b"\n")
    folder = (cache or cache_dir("tokenizers")) / f"bpe-{vocab_size}-{h.hexdigest()[:16]}"
    if (folder / "tokenizer.json").is_file():
        return LabTokenizer(PreTrainedTokenizerFast.from_pretrained(str(folder)), keeps_newlines=True)
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator((line + "\n" for line in lines), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    out = LabTokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS),
                       keeps_newlines=True)
    tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    out.save(tmp)
    try:
        tmp.replace(folder)  # never a half-written cache entry
    except OSError:  # another process cached the same tokenizer first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_tokenizer(path: str | Path) -> LabTokenizer:
    """A saved Hugging Face tokenizer folder (a model checkpoint folder works too)."""
    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"tokenizer {path}: no such folder; give word, bpe or a saved tokenizer folder")
    try:
        fast = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        raise UsageError(f"tokenizer {path}: not a Hugging Face tokenizer folder ({first_line(e)})") from None
    # a word-level tokenizer has no byte fallback, so it cannot carry line breaks
    backend = getattr(fast, "backend_tokenizer", None)
    return LabTokenizer(fast, keeps_newlines=not (backend is not None and isinstance(backend.model, models.WordLevel)))


def make_tokenizer(spec: str, train_lines: list[str], vocab_size: int | None) -> LabTokenizer:
    """``word`` (vocabulary limit ``vocab_size``, None: every word), ``bpe`` (``vocab_size`` tokens,
    default 4096) or a tokenizer folder."""
    if vocab_size is not None and vocab_size < 1:
        raise UsageError(f"vocabulary limit {vocab_size}: use at least 1 (or leave it out)")
    if spec == "word":
        return word_tokenizer(Vocab.build((basic_english(line) for line in train_lines), max_size=vocab_size))
    if spec == "bpe":
        return train_bpe(train_lines, vocab_size or 4096)
    if Path(spec).expanduser().is_dir():
        return load_tokenizer(Path(spec).expanduser())
    raise UsageError(f"tokenizer {spec!r}: use word, bpe or the path of a saved tokenizer folder")
