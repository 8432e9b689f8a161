"""Attention's normaliser, and the variants of it that decide where a query's spare mass goes.

Softmax makes every row sum to 1, so a query with nothing to attend to must still put its mass
somewhere: the first tokens, seen by every later query, become sinks (Xiao et al. 2024; Gu et al.
2025). The variants the sinks-from-scratch study trains (:data:`attnlab.core.variant_names.VARIANTS`):

- ``softmax``     vanilla: exp(x_i) / Σ_j exp(x_j).
- ``softmax1``    off-by-one (Miller's SoftMax₁, StreamingLLM's "zero sink"): exp(x_i) / (1 + Σ_j exp(x_j)),
                  i.e. softmax over the row joined with a constant 0 logit, that column dropped after.
- ``sink-logit``  the same with a *learned* logit per head instead of 0 (gpt-oss): rows sum to < 1.
- ``gated``       vanilla softmax; the head's output is scaled by sigmoid(x W_g) computed from the
                  layer's input (Qwen's gated attention), so a head can output ~0 without a sink.
- ``sink-token``  vanilla softmax; a learnable token (a new vocabulary entry) is prepended to every
                  sample and kept as the first cache slot (StreamingLLM's "learnable sink").
- ``relu``        no softmax: relu(x_i) / n, n the keys the row sees (Guo et al. 2024's intervention:
                  rows need not sum to 1, so a query with nothing to attend to can attend to nothing).

Only ``softmax1`` and ``sink-logit`` change the normaliser: :func:`sink_softmax` is both (a sink
logit of 0 is softmax1, one of -inf is softmax). Pure torch: the model adapter
(:mod:`attnlab.models.variants`) and the evicting cache (:mod:`attnlab.kv.attention`) call the
same function, so training, probing and streaming normalise alike.
"""
from __future__ import annotations

import torch


def sink_softmax(logits: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    """Row softmax with one extra logit per head joined to each row and dropped after.

    logits (B, H, q, S) (masked entries -inf); sink (H,) or None (plain softmax). Returns (B, H, q, S)
    in float32: rows sum to 1 - p_sink <= 1. A fully masked row puts all its mass on the sink (no NaN)."""
    x = logits.float()
    if sink is None:
        return x.softmax(-1)
    b, h, q, _ = x.shape
    col = sink.float().view(1, h, 1, 1).expand(b, h, q, 1)  # (B, H, q, 1)
    return torch.cat([x, col], -1).softmax(-1)[..., :-1]


def relu_normalise(logits: torch.Tensor) -> torch.Tensor:
    """ReLU attention's weights: relu(x) / (the row's visible keys). logits (B, H, q, S), masked entries -inf.
    Returns float32 (B, H, q, S)."""
    x = logits.float()
    visible = torch.isfinite(x).sum(-1, keepdim=True).clamp_min(1)  # (B, H, q, 1): i + 1 for causal row i
    return x.clamp_min(0) / visible  # -inf -> 0


def normalise(logits: torch.Tensor, sink: torch.Tensor | None, relu: bool = False) -> torch.Tensor:
    """The variant's normaliser: ReLU attention's, or the (sink) softmax."""
    return relu_normalise(logits) if relu else sink_softmax(logits, sink)


def eager_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float,
                    mask: torch.Tensor | None = None, sink: torch.Tensor | None = None,
                    dropout: float = 0.0, training: bool = False,
                    relu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with the probabilities materialised. query (B, Hq, q, D); key/value (B, Hkv, S, D),
    each KV head serving Hq/Hkv query heads (grouped-query); mask: additive float or bool (True = keep),
    broadcastable to (B, Hq, q, S). -> (output (B, Hq, q, Dv), probabilities (B, Hq, q, S))."""
    g = query.shape[1] // key.shape[1]  # query heads per KV head
    k = key.repeat_interleave(g, dim=1) if g > 1 else key  # (B, Hq, S, D)
    v = value.repeat_interleave(g, dim=1) if g > 1 else value
    logits = (query @ k.transpose(-1, -2)) * scaling  # (B, Hq, q, S)
    if relu and mask is not None and mask.dtype != torch.bool:  # ReLU counts the visible keys: -inf, not min float
        mask = mask > torch.finfo(mask.dtype).min / 2
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else logits + mask
    probs = normalise(logits, sink, relu).to(query.dtype)
    dropped = torch.nn.functional.dropout(probs, p=dropout, training=training) if dropout else probs
    return dropped @ v, probs
