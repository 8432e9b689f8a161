"""Decode speed at batch 1: dense vs the MLP computed on the kept neurons only (``SparseMLP`` gather mode)."""
from __future__ import annotations

import contextlib
import time

import torch
from transformers import DynamicCache

from attnlab.sparsity.mlp import SparseMLP

WARMUP = 3  # untimed steps: the first steps after prefill pay allocator and first-call costs


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def greedy_decode(model, prompt: torch.Tensor, steps: int, context, warmup: int = WARMUP,
                  follow: list[int] | None = None) -> tuple[list[int], list[int], float]:
    """Prefill ``prompt`` (T,), then ``warmup`` + ``steps`` decode steps with a DynamicCache inside
    ``context()``: (the tokens fed, the model's argmax after each, seconds per timed step). Greedy unless
    ``follow`` (another run's tokens fed) is given: then those tokens are fed (teacher forcing), so two
    runs are compared token by token on the same context instead of diverging after their first miss."""
    device = next(model.parameters()).device
    prompt = prompt.to(device)  # a text's ids come on the CPU (on a GPU the embedding refused them)
    with context():
        cache = DynamicCache(config=model.config)
        logits = model(prompt[None], past_key_values=cache, use_cache=True).logits  # (1, T, V)
        argmax = [int(logits[0, -1].argmax())]
        fed, total = [], 0.0
        for s in range(warmup + steps):
            fed.append(follow[s] if follow is not None else argmax[-1])
            _sync(device)
            t0 = time.perf_counter()
            logits = model(torch.tensor([[fed[-1]]], device=device), past_key_values=cache,
                           use_cache=True).logits  # (1, 1, V)
            argmax.append(int(logits[0, -1].argmax()))  # the .item() syncs: part of the step, as in any decode
            _sync(device)
            if s >= warmup:
                total += time.perf_counter() - t0
    return fed, argmax, total / steps


def decode_speed(model, prompt: torch.Tensor, rule, steps: int) -> dict:
    """Dense decode vs decode under ``SparseMLP(model, rule, mode="gather")`` on the same prompt, batch 1:
    ms per step, tokens/s, their ratio, and the share of steps whose argmax agrees with the dense greedy
    token when the sparse run is fed the dense run's tokens (teacher forcing; the prompt's own next token
    counted too)."""
    fed, dense_argmax, dense_s = greedy_decode(model, prompt, steps, contextlib.nullcontext)
    _, sparse_argmax, sparse_s = greedy_decode(model, prompt, steps, lambda: SparseMLP(model, rule, mode="gather"),
                                               follow=fed)
    agree = sum(a == b for a, b in zip(dense_argmax, sparse_argmax)) / len(dense_argmax)
    return {"batch": 1, "prompt_tokens": int(prompt.numel()), "warmup_steps": WARMUP, "steps": steps,
            "dense_ms_per_step": dense_s * 1e3, "sparse_ms_per_step": sparse_s * 1e3,
            "dense_tokens_per_s": 1 / dense_s, "sparse_tokens_per_s": 1 / sparse_s,
            "speedup": dense_s / sparse_s, "top1_agreement": agree}
