"""Streaming perplexity through a KV cache (StreamingLLM's protocol) and its baselines.

``stream_nll`` feeds a token stream through the model ``chunk`` tokens at a time, keeping only
what the cache keeps, and records the NLL of every next token. With ``chunk=1`` this is the
papers' protocol (decode one token at a time). With ``chunk > 1`` the tokens of a chunk attend to
each other and to the cache as it was *before* the chunk (eviction happens between chunks): exact
for the dense cache, an approximation for evicting policies (they see up to budget + chunk - 1
tokens), much faster on a CPU.

``recompute_nll`` is the sliding window with re-computation baseline: every token re-encodes its
last ``window`` tokens from scratch (exact window attention, O(T·W) work).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class StreamResult:
    nll: np.ndarray  # (T-1,) NLL of token t+1 given the stream up to t
    seconds: float
    kv_bytes: list[tuple[int, int]] = field(default_factory=list)  # (tokens seen, bytes stored)
    clock: list[tuple[int, float]] = field(default_factory=list)  # (tokens seen, seconds since the start)

    def throughput(self, every: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """Tokens/s along the stream, over windows of about ``every`` tokens: (tokens seen, tokens/s)."""
        pts = [(0, 0.0)] + self.clock
        step = max(1, every // max(1, pts[1][0] if len(pts) > 1 else 1))
        sel = pts[::step]
        t = np.array([p[0] for p in sel[1:]])
        rate = np.diff([p[0] for p in sel]) / np.maximum(np.diff([p[1] for p in sel]), 1e-9)
        return t, rate

    @property
    def ppl(self) -> float:
        return math.exp(float(self.nll.mean()))

    def ppl_of(self, lo: int, hi: int | None = None) -> float:
        return math.exp(float(self.nll[lo:hi].mean()))

    @property
    def tokens_per_s(self) -> float:
        return (len(self.nll) + 1) / self.seconds

    @property
    def late_tokens_per_s(self) -> float | None:
        """Tokens/s over the stream's last half, by the clock: an evicting cache's rate once its budget is full
        (a budget under half the stream), where ``tokens_per_s`` also averages in the steps before it filled
        (and, for a compiled steady step, the eager ones). None without a clock (or with one forward)."""
        if len(self.clock) < 2:
            return None
        (t_mid, s_mid), (t_end, s_end) = self.clock[len(self.clock) // 2], self.clock[-1]
        return (t_end - t_mid) / (s_end - s_mid) if s_end > s_mid else None


@torch.no_grad()
def stream_nll(model, ids: torch.Tensor, cache, chunk: int = 1, progress=None) -> StreamResult:
    """ids (T,) long. ``cache``: a PolicyCache (used as its context manager) or None (plain
    DynamicCache). Returns the per-token NLL, the time taken and the KV bytes along the stream."""
    ids = ids.to(model.device)
    t_total = ids.numel()
    nll = torch.empty(t_total - 1, device=ids.device)  # on the device: a copy to the CPU per step would sync a GPU
    kv, clock = [], []
    ctx = cache if cache is not None else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx:
        past = cache
        for start in range(0, t_total - 1, chunk):
            end = min(start + chunk, t_total - 1)
            out = model(ids[None, start:end], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logp = F.log_softmax(out.logits[0].float(), -1)  # (chunk, V)
            nll[start:end] = -logp.gather(-1, ids[start + 1:end + 1, None])[:, 0]
            clock.append((end, time.perf_counter() - t0))
            if cache is not None:
                kv.append((end, cache.kv_bytes()))
            if progress is not None:
                progress.update(end - start)
    return StreamResult(nll.double().cpu().numpy(), time.perf_counter() - t0, kv, clock)


@torch.no_grad()
def decoder_nll(decoder, ids: torch.Tensor, progress=None) -> StreamResult:
    """The protocol of ``stream_nll(chunk=1)`` through a decoder that keeps its own cache (``prefill(ids)`` and
    ``step(token)``, each -> (1, V) logits of the next position: attnlab.models.compiled.CompiledDecode); ids
    (T,) on the decoder's device.
    The first token is its prefill; its KV bytes, the decoder's ``kv_bytes()`` (a static cache's are constant)."""
    t_total = ids.numel()
    nll = torch.empty(t_total - 1, device=ids.device)  # on the ids' (the decoder's) device, as stream_nll's
    clock = []
    t0 = time.perf_counter()
    logits = decoder.prefill(ids[None, :1])
    for t in range(t_total - 1):
        nll[t] = -F.log_softmax(logits[0].float(), -1)[ids[t + 1]]
        clock.append((t + 1, time.perf_counter() - t0))
        if progress is not None:
            progress.update(1)
        if t + 2 < t_total:
            logits = decoder.step(ids[None, t + 1:t + 2])
    seconds, kv_bytes = time.perf_counter() - t0, decoder.kv_bytes()
    return StreamResult(nll.double().cpu().numpy(), seconds, [(t, kv_bytes) for t, _ in clock], clock)


@torch.no_grad()
def recompute_nll(model, ids: torch.Tensor, window: int, positions: range | None = None,
                  progress=None) -> StreamResult:
    """Sliding window with re-computation: the NLL of token t+1 from a fresh forward over the
    ``window`` tokens ending at t (positions 0..window-1). ``positions``: which t to score."""
    ids = ids.to(model.device)
    ts = positions if positions is not None else range(ids.numel() - 1)
    nll = np.empty(len(ts))
    t0 = time.perf_counter()
    for i, t in enumerate(ts):
        ctx = ids[max(0, t + 1 - window): t + 1][None]
        logits = model(ctx, use_cache=False, logits_to_keep=1).logits[0, -1].float()  # the LM head on one row, not W
        nll[i] = -F.log_softmax(logits, -1)[ids[t + 1]].item()
        if progress is not None:
            progress.update(1)
    return StreamResult(nll, time.perf_counter() - t0)
