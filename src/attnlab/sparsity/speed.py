"""Decode speed at batch 1: dense vs the MLP computed on the kept neurons only (``SparseMLP`` gather mode)."""
from __future__ import annotations

import contextlib
import statistics
import time

import torch
from transformers import DynamicCache

from attnlab.models import arch
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


@contextlib.contextmanager
def no_mlp(model):
    """Every MLP returns zeros: the decode time no MLP sparsity can beat (the Amdahl ceiling's numerator)."""
    mods = [arch.mlp(model, i).module for i in range(len(arch.layers(model)))]
    try:
        for m in mods:
            m.forward = torch.zeros_like
        yield
    finally:
        for m in mods:
            m.__dict__.pop("forward", None)


def amdahl(dense_s: float, no_mlp_s: float, keep: float) -> float:
    """The speed-up over dense of computing ``keep`` of every MLP for free otherwise: dense / (the rest + keep x
    the MLP's share of the step)."""
    return dense_s / (no_mlp_s + keep * (dense_s - no_mlp_s))


def decode_speed(model, prompt: torch.Tensor, rule, steps: int, repeats: int = 1, keep: float | None = None) -> dict:
    """Dense decode vs decode under ``SparseMLP(model, rule, mode="gather")`` on the same prompt, batch 1:
    ms per step, tokens/s, their ratio, and the share of steps whose argmax agrees with the dense greedy
    token when the sparse run is fed the dense run's tokens (teacher forcing; the prompt's own next token
    counted too). ``repeats`` rounds, the variants taking turns; medians. With ``keep``, also the decode with
    every MLP skipped, the Amdahl ceiling at that keep and the share of its gain the sparse decode takes,
    (s - 1) / (c - 1)."""
    runs = {"dense": contextlib.nullcontext, "sparse": lambda: SparseMLP(model, rule, mode="gather")}
    if keep is not None:
        runs["no_mlp"] = lambda: no_mlp(model)
    times, argmax, fed = {k: [] for k in runs}, {}, None
    for _ in range(repeats):
        for name, context in runs.items():
            tokens, argmax[name], seconds = greedy_decode(model, prompt, steps, context, follow=fed)
            fed = fed or tokens  # the first dense run's tokens, fed to every later run
            times[name].append(seconds)
    t = {k: statistics.median(v) for k, v in times.items()}
    agree = sum(a == b for a, b in zip(argmax["dense"], argmax["sparse"])) / len(argmax["dense"])
    out = {"batch": 1, "prompt_tokens": int(prompt.numel()), "warmup_steps": WARMUP, "steps": steps,
           "repeats": repeats, "dense_ms_per_step": t["dense"] * 1e3, "sparse_ms_per_step": t["sparse"] * 1e3,
           "dense_tokens_per_s": 1 / t["dense"], "sparse_tokens_per_s": 1 / t["sparse"],
           "speedup": t["dense"] / t["sparse"], "top1_agreement": agree}
    if keep is not None:
        out["no_mlp_ms_per_step"] = t["no_mlp"] * 1e3
        # from the reported ms, not the seconds: a reader recomputes the ceiling from the result's own fields to
        # the last bit (the ratio is the same; seconds and their ms round apart in the last place)
        ceiling = amdahl(out["dense_ms_per_step"], out["no_mlp_ms_per_step"], keep)
        out |= {"keep": keep, "ceiling": ceiling,
                "share_of_gain": (out["speedup"] - 1) / (ceiling - 1)}
    return out
