"""The attention function ``attnlab_kv``: attention over an evicting cache layer's stored slots, with its own mask.

Registered with transformers' attention-function registry (and ``sdpa_mask`` with its mask registry) by
:func:`register`, which :class:`attnlab.kv.cache.PolicyCache` calls on entering its context. Stored slots are
unordered after eviction, so the model's positional mask cannot describe them: the layer's own ``visible()``
mask does. For H2O it hands the layer the post-softmax attention each slot receives. A module with a sink
logit per head (``module.sinks``: the softmax1 and sink-logit variants of :mod:`attnlab.core.attention`) is
normalised as it was trained, with :func:`~attnlab.core.attention.normalise`. It finds its cache through
the attention module (bound by the cache's context in :data:`BOUND`) and its layer as transformers' own cache
does, by the module's ``layer_idx``; a call without a bound cache (a plain DynamicCache, or none) is plain
SDPA. Pinned to transformers 5.23."""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from attnlab.core.attention import normalise
from attnlab.models.variants import variant_attention

ATTN_NAME = "attnlab_kv"
# attention module -> the PolicyCache whose context binds it (the attention function's only way to its cache)
BOUND: "weakref.WeakKeyDictionary[torch.nn.Module, Cache]" = weakref.WeakKeyDictionary()


def _real_new_tokens(hf_mask: torch.Tensor | None, q: int) -> torch.Tensor | None:
    """(B, q) bool: new token j is real iff the model's mask (B, 1, q, S) lets it see itself (column
    ``S - q + j``, see PolicyLayer.get_mask_sizes); None without a mask (no padding). The model sizes one mask
    on layer 0's slots: a layer that stores more (Ada-KV's, PyramidKV's budgets) reads the same last q columns."""
    if hf_mask is None:
        return None
    j = torch.arange(q, device=hf_mask.device)
    real = hf_mask[:, 0, j, hf_mask.shape[-1] - q + j]  # (B, q)
    return real if real.dtype == torch.bool else real == 0


def policy_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention over a PolicyLayer's slots; query (B, Hq, q, D), key/value (B, Hkv, S, D)."""
    cache = BOUND.get(module)
    layer = cache.layers[module.layer_idx] if cache is not None else None
    if layer is None or key is not layer.keys:  # not this cache's keys (a plain DynamicCache, none): plain SDPA
        # plain SDPA, or a variant's sink normaliser
        return variant_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                 **kwargs)
    q, g = query.shape[2], query.shape[1] // key.shape[1]  # g: query heads per KV head
    real = _real_new_tokens(attention_mask, q)
    if real is not None:
        layer.update_padding(real)
    mask = layer.visible()  # (B, Hkv, q, S) or None
    # materialise the probabilities where H2O scores on them, or the normaliser is the module's own
    if layer.score is not None or getattr(module, "sinks", None) is not None or getattr(module, "relu", False):
        out = materialised(module, query, value, layer, mask, scaling)
    else:
        full_mask = None if mask is None else mask.repeat_interleave(g, dim=1)  # (B, Hq, q, S)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=full_mask, scale=scaling,
                                             enable_gqa=g > 1)
    return out.transpose(1, 2).contiguous(), None


def materialised(module, query, value, layer, mask: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """Attention with its probabilities materialised, query (B, Hq, q, D) over ``layer``'s stored slots, mask
    (B, Hkv, q, S) bool or None -> (B, Hq, q, Dv); the probabilities go to ``layer.update_scores`` where the
    layer keeps scores (H2O). ``layer``: a PolicyLayer, or the compiled steady step's (attnlab.kv.steady)."""
    b, hq, q, d = query.shape
    hkv, s = value.shape[1], value.shape[2]
    g = hq // hkv
    # A group's g query heads stack into one (g*q)-row matmul against their shared KV head:
    # no broadcast copy of the keys (a 5-D broadcast matmul copies them g times).
    # scaled on the query's g*q rows, not on the logits' g*q*S: the same product, a pass over far fewer numbers
    qg = query.reshape(b, hkv, g * q, d) * scaling
    logits = layer.logits(qg)  # (B, Hkv, g*q, S); rolling positions' owed rotations paid here
    if mask is not None:
        logits = logits.view(b, hkv, g, q, s).masked_fill(~mask[:, :, None], float("-inf")).view(b, hkv, g * q, s)
    probs = normalise(logits.view(b, hkv * g, q, s), getattr(module, "sinks", None),
                      getattr(module, "relu", False)).view(b, hkv, g * q, s)
    if layer.score is not None:  # the policy folds it into the slots' scores
        layer.update_scores(probs.view(b, hkv, g, q, s))
    return (probs.to(value.dtype) @ value).view(b, hq, q, -1)  # (B, Hq, q, Dv)


def register() -> None:
    """Make ``attnlab_kv`` a name ``set_attn_implementation`` accepts (idempotent)."""
    if ATTN_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTN_NAME, policy_attention)
        AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
