"""One task item answered by a model through a KV policy in a regime (:mod:`attnlab.leaderboard.regimes`).

The prompt is the item's context (BOS first, where the tokenizer has one) and its question; the context goes
through the policy's cache -- whole, in ``prefill_chunk``-token forwards, in the prefill regime; ``chunk``
tokens a step, evicting as it goes, in the decode regime -- then the question in one forward, then up to
``max_new`` greedy tokens, timed. The answer is scored as RULER scores it (:func:`~.tasks.score`). Positions are
the tokens' own (``original``), as in kvpress. Pure torch over the model and tokenizer it is given.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attnlab.evals.passkey import bos_ids
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from attnlab.leaderboard.regimes import in_regime, kept_tokens
from attnlab.leaderboard.tasks import Count, Item, score


@dataclass(frozen=True)
class Answer:
    prediction: str
    score: float
    context_tokens: int
    kept_context: int  # context tokens the cache still held when the answer began (layer 0, KV head 0)
    kv_bytes: int  # the cache's keys and values then, every layer
    new_tokens: int
    decode_seconds: float  # the greedy tokens after the first

    @property
    def tokens_per_s(self) -> float:
        return (self.new_tokens - 1) / self.decode_seconds if self.new_tokens > 1 and self.decode_seconds else 0.0


def token_count(tok) -> Count:
    """A text's length in ``tok``'s tokens as a prompt counts it (BOS, where the tokenizer has one, included): what
    the tasks cut their prompts to."""
    bos = len(bos_ids(tok))
    return lambda text: bos + len(tok(text, add_special_tokens=False)["input_ids"])


def ids_of(tok, item: Item) -> tuple[list[int], list[int]]:
    """(context ids with BOS, question ids)."""
    return (bos_ids(tok) + tok(item.context, add_special_tokens=False)["input_ids"],
            tok(item.question, add_special_tokens=False)["input_ids"])


@torch.no_grad()
def answer(model, tok, item: Item, policy: str, ratio: float, regime: str, options: dict | None = None,
           chunk: int = 32, prefill_chunk: int = 1024, max_new: int = 32) -> Answer:
    """``item`` answered with ``policy`` (a registered name, with ``options``) keeping ``1 - ratio`` of the
    context, in ``regime``."""
    context, question = ids_of(tok, item)
    cache = _cache(model, policy, ratio, regime, len(context), options)
    with cache:
        _feed(model, cache, context, prefill_chunk if regime == "prefill" else chunk)
        return _finish(model, tok, item, cache, question, len(context), max_new)


@torch.no_grad()
def answers_once(model, tok, item: Item, policy: str, ratios: tuple[float, ...], options: dict | None = None,
                 prefill_chunk: int = 1024, max_new: int = 32) -> list[Answer]:
    """``item`` answered in the prefill regime at each of ``ratios`` from one prefill of its context: nothing is
    evicted while the context comes in and the scores fold as at any budget, so every ratio's cache starts from
    a copy of that one state, compresses once as the question arrives, and answers (as :func:`answer` does,
    exactly: a test)."""
    context, question = ids_of(tok, item)
    state, out = None, []
    for ratio in ratios:
        cache = _cache(model, policy, ratio, "prefill", len(context), options)
        with cache:
            if state is None:
                _feed(model, cache, context, prefill_chunk)
                state = [layer.state_dict() for layer in cache.layers]  # contiguous copies: each ratio clones them
            else:
                for layer, saved in zip(cache.layers, state):
                    layer.load_state_dict(saved)
            out.append(_finish(model, tok, item, cache, question, len(context), max_new))
    return out


def _cache(model, policy: str, ratio: float, regime: str, n: int, options: dict | None) -> PolicyCache:
    # both regimes hold k context tokens and the question when the answer begins (a cache evicts down to its
    # budget before it stores a step's tokens); in the decode regime the answer's tokens then evict
    budget = None if policy == "full" else kept_tokens(ratio, n)
    return PolicyCache(model, in_regime(make_policy(policy, budget, **(options or {})), regime, n), "original")


def _feed(model, cache: PolicyCache, context: list[int], step: int) -> None:
    device = next(model.parameters()).device
    for start in range(0, len(context), step):
        model(torch.tensor([context[start:start + step]], device=device), past_key_values=cache, logits_to_keep=1)


def _finish(model, tok, item: Item, cache: PolicyCache, question: list[int], n: int, max_new: int) -> Answer:
    """The question in one forward, then up to ``max_new`` greedy tokens (timed after the first), scored."""
    device = next(model.parameters()).device
    out = model(torch.tensor([question], device=device), past_key_values=cache, logits_to_keep=1)
    kept = int(cache.kept_mask(0, n)[0, 0].sum())
    kv_bytes = cache.kv_bytes()
    new = [int(out.logits[0, -1].argmax())]
    began = time.perf_counter()
    while len(new) < max_new and new[-1] != tok.eos_token_id:
        out = model(torch.tensor([new[-1:]], device=device), past_key_values=cache, logits_to_keep=1)
        new.append(int(out.logits[0, -1].argmax()))
    seconds = time.perf_counter() - began
    prediction = tok.decode(new, skip_special_tokens=True)
    return Answer(prediction, score(item, prediction), n, kept, kv_bytes, len(new), seconds)
