"""StreamingLLM's sink table: one model streamed through caches n + (W - n), n = 0, 1, 2, 4.

Each cache holds W slots: the first n tokens of the stream (the sinks) and the last W - n; n = 0 is
window attention. Positions roll (they are assigned inside the cache), so no distance exceeds W and
the model never sees a position it was not trained on; the text is several times longer than the
training context, so every cache evicts. Perplexity is the papers' protocol: one token at a time,
exp of the mean next-token NLL.

A model pre-trained with a sink token gets it in front of the text (:func:`attnlab.evals.inputs.with_sink`)
and the NLL of the first text token (predicted from the sink alone) is left out, so every model is
scored on the same targets. Its n = 0 cache evicts the sink token once W tokens have passed: the
deliberate ablation of the published table ("learnable sink, 0 + 1024").
"""
from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.evals.inputs import with_sink
from attnlab.evals.streaming import stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

# StreamingLLM (Xiao et al., ICLR 2024), Table 3: 160M models pre-trained three ways, caches n + (1024 - n)
PUBLISHED = {
    "softmax": {0: 27.87, 1: 18.49, 2: 18.05, 4: 18.05},  # "Vanilla"
    "softmax1": {0: 29214.0, 1: 19.90, 2: 18.27, 4: 18.01},  # "Zero Sink"
    "sink-token": {0: 1235.0, 1: 18.01, 2: 18.01, 4: 18.02},  # "Learnable Sink"
}
# the talk's slide prints two of those cells without their magnitude: an erratum, see the experiment
AS_PRINTED = {("softmax1", 0): 29.214, ("sink-token", 0): 12.35}


def cache_policy(n_sink: int, window: int):
    """n sinks + (window - n) recent tokens; n = 0 is plain window attention."""
    return make_policy("sinks", window, n_sink=n_sink) if n_sink else make_policy("window", window)


def label(n_sink: int, window: int) -> str:
    return f"{n_sink}+{window - n_sink}"


@torch.no_grad()
def sink_table(model, ids: torch.Tensor, window: int, sinks=(0, 1, 2, 4), progress=None) -> dict[int, np.ndarray]:
    """{n: per-token NLL (T-1,)} of ``ids`` (T,) streamed through each cache n + (window - n), token by token,
    positions rolling; a sink-token model's sink goes first and its extra prediction is dropped."""
    stream = with_sink(model, ids)
    skip = stream.numel() - ids.numel()  # 1 for a sink-token model: the first text token, predicted from the sink
    out = {}
    for n in sinks:
        cache = PolicyCache(model, cache_policy(n, window), positions="rolling")
        out[n] = stream_nll(model, stream, cache, chunk=1, progress=progress).nll[skip:]
    return out


def ppl(nll: np.ndarray) -> float:
    return math.exp(float(np.mean(nll)))
