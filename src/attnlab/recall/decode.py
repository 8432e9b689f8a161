"""StreamEval on a real model: the stream tokenised piece by piece, fed once, token by token, through a
cache, with every answer generated in place (greedy) and never re-encoded.

A line is the concatenation of three tokenised pieces -- ``line KEY: REGISTER_CONTENT is <``, the value,
``>\\n`` -- so the value's tokens are known exactly and the model's answer (after the same ``<``) starts on
the same token boundary. For each query we record the answer, whether it is right, its distance in lines
and tokens, and which caches still held the value: the share of (layer, KV head) pairs whose stored slots
contained every token of the value when the answer began (always 1 for the full cache; 0 or 1 for
sinks+window; anything between for the H2O family, whose heads keep different tokens).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attnlab.core.errors import UsageError
from attnlab.evals.passkey import PasskeyPrompts, answer_of, bos_ids
from attnlab.recall.streameval import ANSWER, ANSWER_END, HEADER, LINE, QUESTION, Query, Stream, is_correct

LINE_HEAD, LINE_TAIL = LINE.split("{value}")


@dataclass(frozen=True)
class Answer:
    query: Query
    text: str  # the answer_tokens tokens the model wrote, decoded
    correct: bool
    token_distance: int  # tokens from the value's first token to the query's last (the answer's first logits)
    kept: float  # share of (layer, KV head) pairs holding every token of the value when the answer began
    at: tuple[int, ...]  # stream index of the token whose logits gave each generated token


@dataclass
class StreamEvalRun:
    answers: list[Answer]
    ids: torch.Tensor  # (T,) every token fed, generated answers included
    seconds: float
    kv_bytes: int  # bytes the cache held at the end


def chat_turns(tokenizer) -> tuple[str, str, str]:
    """The text the tokenizer's chat template puts (before the first user turn, between a user turn and the
    assistant's, between the assistant's and the next user turn), found by rendering a three-turn conversation
    with placeholder contents -- so any template (ChatML, Llama-2's [INST], ...) is read, none hard-coded."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise UsageError(f"chat=true needs a chat (instruction) model, and {name} has no chat template: "
                         "use an instruction-tuned model or drop chat")
    u1, a1, u2 = "QQUSERONEQQ", "QQASSISTANTQQ", "QQUSERTWOQQ"
    turns = [{"role": "user", "content": u1}, {"role": "assistant", "content": a1}, {"role": "user", "content": u2}]
    text = tokenizer.apply_chat_template(turns, tokenize=False)
    opening, rest = text.split(u1)
    to_assistant, rest = rest.split(a1)
    return opening, to_assistant, rest.split(u2)[0]


class Pieces:
    """Token ids of the format's pieces for one tokenizer (tokenised once each). ``chat``: the stream is a
    conversation in the tokenizer's chat template -- lines and each question in a user turn, the answer (from
    ``ANSWER`` on) the assistant's turn, then a new user turn goes on with the stream."""

    def __init__(self, tokenizer, chat: bool = False):
        self.tok = tokenizer
        if chat:  # the template writes its own BOS, where it has one
            self.bos, (self.opening, self.to_assistant, to_user) = [], chat_turns(tokenizer)
            self.answer_end = self.ids(to_user)
        else:
            self.bos, self.opening, self.to_assistant = bos_ids(tokenizer), "", ""
            self.answer_end = self.ids(ANSWER_END)
        self.header = self.bos + self.ids(self.opening + HEADER)

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"] if text else []

    def line(self, key: str, value: int) -> tuple[list[int], list[int], list[int]]:
        """(head, value, tail) ids of one line."""
        return self.ids(LINE_HEAD.format(key=key)), self.ids(str(value)), self.ids(LINE_TAIL)

    def query(self, key: str) -> list[int]:
        return self.ids(QUESTION.format(key=key)) + self.ids(self.to_assistant) + self.ids(ANSWER.format(key=key))


def check_budget(pieces: Pieces, stream: Stream, budget: int | None, n_sink: int, answer_tokens: int) -> None:
    """A query must fit in the cache beside the sinks, or the model loses the question while reading it."""
    if budget is None:
        return
    longest = max((len(pieces.query(q.key)) for q in stream.queries), default=0) + answer_tokens
    if budget < n_sink + longest:
        raise UsageError(f"budget {budget} is smaller than {n_sink} sink(s) + the longest query and its answer "
                         f"({longest} tokens): use a budget >= {n_sink + longest}")


class InPlace:
    """One stream through one cache (a PolicyCache, or None for the model's own dense cache): tokens fed one
    at a time, greedy answers generated and fed in place. Use as a context manager (it enters the cache).

    Tokens go through the decoder alone (``base_model``); the LM head -- a fifth of SmolLM2's weights, read
    once per token on a weight-bound CPU -- runs only on the last hidden state, when an answer needs logits.
    """

    def __init__(self, model, cache=None, progress=None):
        self.model, self.cache, self.progress = model, cache, progress
        self.head = model.get_output_embeddings()
        self.fed: list[int] = []
        self.past, self.hidden = cache, None

    def __enter__(self) -> "InPlace":
        if self.cache is not None:
            self.cache.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.cache is not None:
            self.cache.__exit__(*exc)

    def _forward(self, ids: list[int]) -> None:
        x = torch.tensor([ids], device=self.model.device)  # (1, n)
        out = self.model.base_model(x, past_key_values=self.past, use_cache=True)
        self.past, self.hidden = out.past_key_values, out.last_hidden_state[0, -1]  # (d,)
        self.fed += ids
        if self.progress is not None:
            self.progress.update(len(ids))

    def feed(self, ids: list[int]) -> range:
        """Feed ``ids`` one token at a time; returns their stream indices."""
        start = len(self.fed)
        for i in ids:
            self._forward([i])
        return range(start, len(self.fed))

    def prefill(self, ids: list[int]) -> None:
        """Feed ``ids`` in one forward: exact for the dense cache (an evicting one would see the whole chunk)."""
        self._forward(ids)

    def next_token(self) -> int:
        return int(self.head(self.hidden).argmax())

    def greedy(self, n: int) -> tuple[list[int], list[int]]:
        """``n`` greedy tokens, each fed as it is chosen: (the tokens, the stream index whose logits chose each)."""
        out, at = [], []
        for _ in range(n):
            at.append(len(self.fed) - 1)
            out.append(self.next_token())
            self.feed(out[-1:])
        return out, at

    def holds(self, span: range) -> float:
        """Share of (layer, KV head) pairs whose stored slots include every stream index in ``span``."""
        if self.cache is None:
            return 1.0
        want = torch.tensor(list(span))
        held = [(layer.pos[0, :, :, None] == want).any(-2).all(-1) for layer in self.cache.layers]  # (H,) each
        return torch.cat(held).float().mean().item()


@torch.no_grad()
def run_streameval(model, pieces: Pieces, stream: Stream, cache=None, answer_tokens: int = 6,
                   progress=None) -> StreamEvalRun:
    """Feed ``stream`` through ``cache`` one token at a time, answering each query greedily in place."""
    by_line: dict[int, list[Query]] = {}
    for q in stream.queries:
        by_line.setdefault(q.at_line, []).append(q)
    answers, value_span = [], {}
    t0 = time.perf_counter()
    with InPlace(model, cache, progress) as run:
        run.feed(pieces.header)
        for n in range(len(stream.keys)):
            head, value, tail = pieces.line(stream.keys[n], stream.values[n])
            run.feed(head)
            value_span[n] = run.feed(value)
            run.feed(tail)
            for q in by_line.get(n + 1, ()):
                run.feed(pieces.query(q.key))
                span = value_span[q.line]
                kept = run.holds(span)
                out, at = run.greedy(answer_tokens)
                run.feed(pieces.answer_end)
                text = pieces.tok.decode(out)
                answers.append(Answer(q, text, is_correct(text, q.value), at[0] - span.start, kept, tuple(at)))
    kv = cache.kv_bytes() if cache is not None else 0
    return StreamEvalRun(answers, torch.tensor(run.fed), time.perf_counter() - t0, kv)


def stream_tokens(pieces: Pieces, stream: Stream, answer_tokens: int) -> int:
    """How many tokens ``run_streameval`` feeds: header, lines, and per query its question, answer and end."""
    lines = sum(sum(map(len, pieces.line(k, v))) for k, v in zip(stream.keys, stream.values))
    turns = sum(len(pieces.query(q.key)) + answer_tokens + len(pieces.answer_end) for q in stream.queries)
    return len(pieces.header) + lines + turns


def find(ids: list[int], sub: list[int]) -> int:
    """Index of the first occurrence of ``sub`` in ``ids``."""
    return next(i for i in range(len(ids) - len(sub) + 1) if ids[i:i + len(sub)] == sub)


@torch.no_grad()
def passkey_in_place(model, tokenizer, prompts: dict, cache_of, max_new: int = 10, progress=None) -> list[dict]:
    """Each passkey prompt (case -> ids, :func:`attnlab.evals.passkey.build_prompts`) fed token by token through
    a fresh ``cache_of()``, then ``max_new`` greedy tokens: the answer, and the share of (layer, KV head) pairs
    still holding the key's sentence when the answer began."""
    key_ids = PasskeyPrompts(tokenizer)
    rows = []
    for case, ids in prompts.items():
        key = key_ids.key_sentence(case.key)
        at = find(ids, key)
        with InPlace(model, cache_of(), progress) as run:
            run.feed(ids)
            kept = run.holds(range(at, at + len(key)))
            out, _ = run.greedy(max_new)
        text = tokenizer.decode(out, skip_special_tokens=True)
        answer = answer_of(text)
        rows.append({"length": case.length, "depth": case.depth, "sample": case.sample, "key": case.key,
                     "answer": answer, "correct": answer == case.key, "output": text,
                     "kept": kept, "distance": len(ids) - 1 - at})
    return rows
