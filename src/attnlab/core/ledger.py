"""The bandwidth ledger of a decode run: the bytes one token's step reads, the roofline tokens/s those bytes
allow at this machine's memory bandwidth, and the yield -- the share of that roofline the run reached.

At batch 1 a decode step reads every weight once and the whole KV cache it keeps:

    bytes per token = weights (each at the bytes it is stored in: a quantized projection's own; an embedding
                      only its token's row; a sparse MLP's projections at the share it keeps)
                    + KV kept (the mean over the run) + extra (a sparsity predictor's weights)
    roofline        = bandwidth / bytes per token        yield = measured tokens/s / roofline

A run fed c tokens a forward (a stream's chunk, a prompt's prefill) reads the weights and the cache once for all
c: its bytes per token are the sum above over c. Taken per token, a chunked run's roofline would be c times too
low and its yield above 1.

The bandwidth is measured in the same run, STREAM's copy kernel: the bytes read and written per second
while copying a buffer larger than the caches. A yield near 1 means the step is as fast as reading its bytes
allows; what is left below it is the step's other work (launches, small ops, the attention's arithmetic).
"""
from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from attnlab.core import weights


def copy_bandwidth(device: str | torch.device = "cpu", mib: int = 256, repeats: int = 5) -> float:
    """Bytes per second (read + written) copying ``mib`` MiB, the median of ``repeats`` copies after one
    warm-up: STREAM's copy, as a roofline's bandwidth."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        if src.is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        if src.is_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times[1:])


def _module_bytes(m: nn.Module) -> int:
    own = list(m.parameters(recurse=False))
    if isinstance(m, nn.Embedding):
        return m.embedding_dim * m.weight.element_size()  # a token reads its own row
    wq = weights.of(m)
    if wq is not None:  # a scheme's stored weight replaces the float one, which is no longer read
        return wq.nbytes + sum(p.nbytes for p in own if p is not getattr(m, "weight", None))
    return sum(p.nbytes for p in own)


def weight_bytes(model: nn.Module, shares: dict[nn.Module, float] | None = None) -> int:
    """Bytes of weights a batch-1 decode step reads; ``shares``: modules read in part (a sparse MLP's
    projections at the share of rows it keeps)."""
    shares = shares or {}
    return int(sum(_module_bytes(m) * shares.get(m, 1.0) for m in model.modules()))


def ledger(model: nn.Module, tokens_per_s: float, kv_bytes: float, bandwidth: float,
           shares: dict[nn.Module, float] | None = None, extra_bytes: int = 0, tokens_per_forward: float = 1) -> dict:
    """One run's line of the ledger (bytes, the roofline tokens/s at ``bandwidth`` bytes/s, the yield); a run of
    ``tokens_per_forward`` tokens a forward (on average) reads its bytes once for all of them."""
    w = weight_bytes(model, shares)
    per_token = (w + kv_bytes + extra_bytes) / tokens_per_forward
    roofline = bandwidth / per_token
    return {"bytes_per_token": per_token, "weight_bytes": w, "kv_bytes": kv_bytes, "extra_bytes": extra_bytes,
            "tokens_per_forward": tokens_per_forward, "bandwidth_bytes_per_s": bandwidth,
            "roofline_tokens_per_s": roofline, "tokens_per_s": tokens_per_s, "yield": tokens_per_s / roofline}
