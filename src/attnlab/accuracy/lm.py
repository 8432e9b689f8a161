"""attnlab's model as an lm-evaluation-harness ``LM`` whose KV cache can evict (the adapter to lm-eval).

Why not lm-eval's own ``hf`` model with an evicting cache: it scores each choice with one prefill of
context + continuation, so a KV policy has nothing to evict while the prompt is read and accuracy is
unchanged by construction (lm-eval issue 3298; H2O's own accuracy tables are attention masks). Here the
context is *streamed*: its tokens but the last go through the cache ``chunk`` at a time, the policy
evicting down to its budget as the context grows; then each continuation is scored against that evicted
cache (the last context token and the continuation but its last token, in one forward), and the cache is
put back for the next choice. Without a policy the cache is transformers' ``DynamicCache`` and the
scores are lm-eval's ``hf`` model's own (tokenisation, empty contexts and left truncation are
lm-eval's: ``TemplateLM``); a policy whose budget exceeds the prompt scores the same.

Per task it records the share of context tokens the policy evicted (``evicted``), so a table can say
whether a budget engaged at all.
"""
from __future__ import annotations

import contextlib
import copy
from collections import defaultdict

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import resolve_max_length
from transformers import DynamicCache

from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import KVPolicy


class EvictingLM(TemplateLM):
    """``model`` and ``tok`` scored through ``policy``'s cache, the context fed ``chunk`` tokens at a time (no
    policy: transformers' own cache, the context in one forward)."""

    def __init__(self, model, tok, policy: KVPolicy | None = None, positions: str = "original", chunk: int = 32,
                 progress=None, lag_limit: int = 0):
        super().__init__()
        self.model, self.tokenizer = model.eval(), tok
        self.policy, self.positions, self.chunk, self.progress = policy, positions, chunk, progress
        self.lag_limit = lag_limit  # rolling positions: evictions kept keys may owe their rotations for
        self.evicted: dict[str, list[float]] = defaultdict(list)  # task -> per context, share of its tokens evicted
        self._tasks: list[str] = []

    # ---------------------------------------------------------------- what lm-eval asks of a TemplateLM
    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:  # as lm-eval's hf model: BOS where the tokenizer has one
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return resolve_max_length(self.model.config, self.tokenizer, default=2048)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        kw = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(string, **kw)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        self._tasks = [getattr(r, "task_name", None) or "?" for r in requests]  # TemplateLM keeps the order
        return super().loglikelihood(requests, disable_tqdm=True)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("attnlab eval scores choices and cloze words; rolling perplexity is "
                                  "`attnlab stream` / `attnlab longppl`")

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("attnlab eval runs loglikelihood tasks only")

    # ---------------------------------------------------------------- scoring
    @torch.no_grad()
    def _loglikelihood_tokens(self, requests, **kwargs) -> list[tuple[float, bool]]:
        """(sum of the continuation's log-probabilities, whether it is the greedy continuation) per request;
        requests that share a context (a question's choices) share one streamed cache."""
        by_context: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, (_, context, continuation) in enumerate(requests):  # lm-eval's left truncation, per request
            by_context[tuple(context[-(self.max_length + 1 - len(continuation)):])].append(i)
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        for context, members in by_context.items():
            context = list(context)
            task = self._tasks[members[0]] if members[0] < len(self._tasks) else "?"
            for i, score in zip(members, self._score_group(context, [requests[i][2] for i in members], task)):
                out[i] = score
            if self.progress is not None:
                self.progress.update(len(members))
        return out

    def _score_group(self, context: list[int], continuations: list[list[int]], task: str):
        device = self.model.device
        cache = DynamicCache(config=self.model.config) if self.policy is None else \
            PolicyCache(self.model, self.policy, self.positions, lag_limit=self.lag_limit)
        with cache if self.policy is not None else contextlib.nullcontext():
            prefix = torch.tensor(context[:-1], device=device)  # (T-1,)
            chunk = self.chunk if self.policy is not None else max(1, prefix.numel())  # dense: one forward
            for start in range(0, prefix.numel(), chunk):  # the policy evicts as the context grows
                # logits_to_keep=1: the prefix's own predictions are never read (the LM head is 28M MACs a token)
                self.model(prefix[None, start:start + chunk], past_key_values=cache, use_cache=True,
                           logits_to_keep=1)
            if self.policy is not None and prefix.numel():
                self.evicted[task].append(1 - cache.stored(0) / prefix.numel())
            saved = _snapshot(cache)
            scores = []
            for cont in continuations:
                inp = torch.tensor([context[-1]] + cont[:-1], device=device)[None]  # (1, C)
                logits = self.model(inp, past_key_values=cache, use_cache=True).logits[0]  # (C, V)
                logp = F.log_softmax(logits.float(), -1)
                target = torch.tensor(cont, device=device)
                scores.append((float(logp.gather(-1, target[:, None]).sum()), bool((logp.argmax(-1) == target).all())))
                _restore(cache, saved)
        return scores


def _snapshot(cache):
    """What putting the cache back after one continuation needs: its length (dense) or its state (policy)."""
    return cache.get_seq_length() if isinstance(cache, DynamicCache) else copy.deepcopy(cache.state_dict())


def _restore(cache, saved) -> None:
    if isinstance(cache, DynamicCache):
        if extra := cache.get_seq_length() - saved:
            cache.crop(-extra)  # transformers 5.23: a negative count removes that many tokens
    else:
        cache.load_state_dict(copy.deepcopy(saved))  # the layers write into their tensors in place
