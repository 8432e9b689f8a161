"""Passkey retrieval (the PI / landmark-attention / YaRN protocol) on a transformers causal LM.

A prompt of ``length`` tokens: the instruction, the filler repeated to the target length with the
key sentence inserted at a relative ``depth`` (0: right after the instruction, 1: just before the
question), then the question. The model continues greedily for ``max_new`` tokens; the answer is
correct iff the first integer in the continuation equals the key.

Every piece is tokenised once (:class:`PasskeyPrompts`); a prompt is a concatenation of token ids,
so a grid of lengths × depths × samples × scalings costs one prefill per prompt and no
re-tokenisation. The prefill is one forward (dynamic NTK then sees the whole prompt's length, as it
would in one ``generate`` call) computing only the last position's logits.

:func:`passkey_grid` evaluates whatever model it is given; a method (a RoPE scaling, a KV policy)
is wrapped around it by the caller: ``with ScaledRope(model, s): passkey_grid(model, tok, prompts)``.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from attnlab.core.errors import ConfigError, UsageError
from attnlab.evals.passkey_text import FILLER, INSTRUCTION, KEY_RANGE, KEY_SENTENCE, QUESTION, answer_of


@dataclass(frozen=True)
class PasskeyCase:
    length: int  # prompt tokens
    depth: float  # where the key sits in the filler, 0..1
    sample: int
    key: int


def check_grid(lengths, depths, samples: int) -> None:
    """Refuse a grid that cannot be run, naming the condition that failed."""
    if samples < 1:
        raise ConfigError(f"samples={samples}: give at least 1 prompt per (length, depth)")
    if not lengths:
        raise ConfigError("lengths is empty: give at least one prompt length")
    if not depths:
        raise ConfigError("depths is empty: give at least one key depth in [0, 1]")
    outside = [d for d in depths if not 0 <= d <= 1]
    if outside:
        raise ConfigError(f"depths {', '.join(f'{d:g}' for d in outside)}: a key depth lies in [0, 1] "
                          "(0: right after the instruction, 1: just before the question)")


def passkey_cases(lengths, depths, samples: int, seed: int = 0) -> list[PasskeyCase]:
    """The grid with its keys: one fixed draw per (length, depth, sample), the same for every
    scaling compared on it."""
    check_grid(lengths, depths, samples)
    rng = np.random.default_rng(seed)
    return [PasskeyCase(int(n), float(d), s, int(rng.integers(KEY_RANGE[0], KEY_RANGE[1] + 1)))
            for n in lengths for d in depths for s in range(samples)]


def bos_ids(tokenizer) -> list[int]:
    """The tokenizer's BOS as a prompt's first token, if it has one; else nothing."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return [bos] if bos is not None else []


class PasskeyPrompts:
    """Token ids of the protocol's pieces, tokenised once; prompts are assembled from them."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.head = bos_ids(tokenizer) + self._ids(INSTRUCTION)
        self.filler = self._ids(FILLER)
        self.question = self._ids(QUESTION)

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def key_sentence(self, key: int) -> list[int]:
        return self._ids(KEY_SENTENCE.format(key=key))

    def min_length(self, key: int = KEY_RANGE[1]) -> int:
        return len(self.head) + len(self.key_sentence(key)) + len(self.question) + len(self.filler)

    def build(self, case: PasskeyCase) -> list[int]:
        """Exactly ``case.length`` token ids (the last filler repetition is cut to fit)."""
        key = self.key_sentence(case.key)
        room = case.length - len(self.head) - len(key) - len(self.question)
        if room < len(self.filler):
            raise UsageError(f"passkey length {case.length} is too short for the protocol: use at least "
                             f"{self.min_length()} tokens")
        n_full, rest = divmod(room, len(self.filler))
        at = round(case.depth * n_full)  # the key goes between filler repetitions
        body = self.filler * at + key + self.filler * (n_full - at) + self.filler[:rest]
        return self.head + body + self.question


def estimate_bytes(config, length: int) -> int:
    """Rough peak memory of one float32 prefill of ``length`` tokens: the KV cache plus the largest
    activations alive at once (SDPA does not materialise the T×T map)."""
    c = config.get_text_config(decoder=True)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    kv = 2 * c.num_hidden_layers * n_kv * head_dim * length * 4
    act = length * (6 * c.hidden_size + 3 * getattr(c, "intermediate_size", 4 * c.hidden_size)) * 4
    return kv + act


def available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_fits(config, length: int, device: str = "cpu") -> None:
    """Refuse, before allocating, a prompt whose prefill would not fit in memory."""
    need = estimate_bytes(config, length)
    have = torch.cuda.mem_get_info()[0] if device == "cuda" else available_bytes()
    if need > 0.8 * have:
        raise UsageError(f"a {length}-token prefill needs about {need / 2**30:.1f} GiB but only "
                         f"{have / 2**30:.1f} GiB is free: use shorter --lengths")


@torch.no_grad()
def retrieve(model, tokenizer, ids: list[int], max_new: int = 10) -> str:
    """Prefill ``ids`` in one forward, then ``max_new`` greedy tokens: the decoded continuation."""
    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids], device=device)
    out = model(x, past_key_values=cache, logits_to_keep=1)
    new = [int(out.logits[0, -1].argmax())]
    while len(new) < max_new and new[-1] != tokenizer.eos_token_id:
        out = model(torch.tensor([new[-1:]], device=device), past_key_values=cache, logits_to_keep=1)
        new.append(int(out.logits[0, -1].argmax()))
    return tokenizer.decode(new, skip_special_tokens=True)


@dataclass
class PasskeyResult:
    case: PasskeyCase
    answer: int | None
    text: str
    seconds: float

    @property
    def correct(self) -> bool:
        return self.answer == self.case.key


def build_prompts(tokenizer, cases: list[PasskeyCase]) -> dict[PasskeyCase, list[int]]:
    """Each case's prompt token ids, tokenised once (and reused under every method compared)."""
    prompts = PasskeyPrompts(tokenizer)
    return {c: prompts.build(c) for c in cases}


def passkey_grid(model, tokenizer, prompts: dict[PasskeyCase, list[int]], progress=None) -> list[PasskeyResult]:
    """Every prompt through ``model``: one prefill and a greedy answer per case."""
    rows = []
    for case, ids in prompts.items():
        t0 = time.perf_counter()
        text = retrieve(model, tokenizer, ids)
        rows.append(PasskeyResult(case, answer_of(text), text, time.perf_counter() - t0))
        if progress is not None:
            progress.update(1)
    return rows


def accuracy_grid(rows: list[PasskeyResult]) -> tuple[list[int], list[float], np.ndarray]:
    """(lengths, depths, accuracy (n_depths, n_lengths)) over the samples of each cell."""
    lengths = sorted({r.case.length for r in rows})
    depths = sorted({r.case.depth for r in rows})
    acc = np.zeros((len(depths), len(lengths)))
    for i, d in enumerate(depths):
        for j, n in enumerate(lengths):
            cell = [r.correct for r in rows if r.case.depth == d and r.case.length == n]
            acc[i, j] = np.mean(cell)
    return lengths, depths, acc


def accuracy_at(rows: list[PasskeyResult], length: int) -> float:
    return float(np.mean([r.correct for r in rows if r.case.length == length]))


def passkey_metrics(results: dict[str, list[PasskeyResult]]) -> dict:
    """metrics.json's view of a grid per method: one record per prompt."""
    return {name: [{"length": r.case.length, "depth": r.case.depth, "sample": r.case.sample, "key": r.case.key,
                    "answer": r.answer, "correct": r.correct, "output": r.text, "seconds": round(r.seconds, 3)}
                   for r in rows] for name, rows in results.items()}
