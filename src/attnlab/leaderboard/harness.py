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
    n = len(context)
    # both regimes hold k context tokens and the question when the answer begins (a cache evicts down to its
    # budget before it stores a step's tokens); in the decode regime the answer's tokens then evict
    budget = None if policy == "full" else kept_tokens(ratio, n)
    cache = PolicyCache(model, in_regime(make_policy(policy, budget, **(options or {})), regime, n), "original")
    device = next(model.parameters()).device
    step = prefill_chunk if regime == "prefill" else chunk
    with cache:
        for start in range(0, n, step):
            model(torch.tensor([context[start:start + step]], device=device), past_key_values=cache,
                  logits_to_keep=1)
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
