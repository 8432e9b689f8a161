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
def greedy_decode(model, prompt: torch.Tensor, steps: int, context, warmup: int = WARMUP) -> tuple[list[int], float]:
    """Prefill ``prompt`` (T,), then ``warmup`` + ``steps`` greedy steps with a DynamicCache inside
    ``context()``: (the tokens decoded, seconds per timed step)."""
    device = prompt.device
    with context():
        cache = DynamicCache(config=model.config)
        logits = model(prompt[None], past_key_values=cache, use_cache=True).logits  # (1, T, V)
        token = logits[:, -1:].argmax(-1)  # (1, 1)
        out, total = [], 0.0
        for s in range(warmup + steps):
            _sync(device)
            t0 = time.perf_counter()
            logits = model(token, past_key_values=cache, use_cache=True).logits  # (1, 1, V)
            token = logits[:, -1:].argmax(-1)  # (1, 1)
            _sync(device)
            if s >= warmup:
                total += time.perf_counter() - t0
                out.append(int(token))
    return out, total / steps


def decode_speed(model, prompt: torch.Tensor, rule, steps: int) -> dict:
    """Dense decode vs decode under ``SparseMLP(model, rule, mode="gather")`` on the same prompt, batch 1:
    ms per step, tokens/s, their ratio, and how many of the greedy tokens the two agree on."""
    dense_tokens, dense_s = greedy_decode(model, prompt, steps, contextlib.nullcontext)
    sparse_tokens, sparse_s = greedy_decode(model, prompt, steps, lambda: SparseMLP(model, rule, mode="gather"))
    agree = sum(a == b for a, b in zip(dense_tokens, sparse_tokens))
    return {"batch": 1, "prompt_tokens": int(prompt.numel()), "warmup_steps": WARMUP, "steps": steps,
            "dense_tokens": len(dense_tokens), "sparse_tokens": len(sparse_tokens),
            "dense_ms_per_step": dense_s * 1e3, "sparse_ms_per_step": sparse_s * 1e3,
            "dense_tokens_per_s": 1 / dense_s, "sparse_tokens_per_s": 1 / sparse_s,
            "speedup": dense_s / sparse_s, "greedy_agreement": agree / steps}


def speed_line(d: dict) -> str:
    """One result line for a ``decode_speed`` block."""
    return (f"decode (batch 1, {d['steps']} greedy steps after a {d['prompt_tokens']}-token prompt): dense "
            f"{d['dense_ms_per_step']:.2f} ms/step ({d['dense_tokens_per_s']:.1f} tok/s), sparse gather "
            f"{d['sparse_ms_per_step']:.2f} ms/step ({d['sparse_tokens_per_s']:.1f} tok/s): {d['speedup']:.2f}x; "
            f"{d['greedy_agreement']:.0%} of greedy tokens agree")
