"""The training lab's Llama with an attention variant (one of :mod:`attnlab.core.variant_names`), as
a transformers model that saves and reloads with it.

``attnlab_llama`` is a Llama whose config carries ``attention_variant`` (and, for ``sink-token``,
``sink_token_id``). :func:`register` (idempotent; :func:`attnlab.models.causal_lm.load_causal_lm` calls
it) makes it known to ``AutoConfig`` and ``AutoModelForCausalLM``, so ``from_pretrained`` on a run's
model/ folder rebuilds the same variant; importing this module changes nothing of transformers'. Its
attention module adds what the variant learns -- ``sinks`` (H,) for sink-logit (a zero buffer for
softmax1: the off-by-one is a sink logit fixed at 0, saved with the weights), ``gate`` (d_model -> H)
for gated -- and every attention function it runs under reads them. Under transformers' own names the
module picks ours: ``sdpa`` runs fused SDPA where the normaliser is plain softmax and the eager sink
normaliser where it is not; ``eager`` (what the trainer's probe switches to for maps) always returns
the probabilities under the variant's normaliser. Any other name is looked up as usual: ``attnlab_kv``
(the evicting cache, :mod:`attnlab.kv.attention`) reads ``sinks`` itself. Vanilla ``softmax`` models stay plain
``LlamaForCausalLM`` checkpoints. Pinned to transformers 5.23.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.llama.modeling_llama import LlamaAttention, apply_rotary_pos_emb

from attnlab.core.attention import eager_attention
from attnlab.core.errors import ConfigError
from attnlab.core.variant_names import VARIANTS

MODEL_TYPE = "attnlab_llama"


class VariantLlamaConfig(LlamaConfig):
    model_type = MODEL_TYPE

    def __init__(self, attention_variant: str = "softmax", sink_token_id: int | None = None, **kwargs):
        if attention_variant not in VARIANTS:
            raise ConfigError(f"attention variant {attention_variant!r}: use one of {', '.join(VARIANTS)}")
        if (attention_variant == "sink-token") != (sink_token_id is not None):
            raise ConfigError("a sink-token model needs sink_token_id (its new vocabulary entry); other variants "
                              "take none")
        self.attention_variant, self.sink_token_id = attention_variant, sink_token_id
        super().__init__(**kwargs)


class VariantAttention(LlamaAttention):
    """Llama attention plus the variant's parameters; the gate multiplies each head's output before o_proj."""

    def __init__(self, config: VariantLlamaConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        h, variant = config.num_attention_heads, config.attention_variant
        if variant == "sink-logit":
            self.sinks = nn.Parameter(torch.zeros(h))  # learned; starts as softmax1
        elif variant == "softmax1":
            # fixed at 0, not learned; saved all the same, so a reload never sees an uninitialised buffer
            self.register_buffer("sinks", torch.zeros(h))
        else:
            self.sinks = None
        # one sigmoid gate per head, computed from the layer's input (Qwen's head-wise gated attention)
        self.gate = nn.Linear(config.hidden_size, h) if variant == "gated" else None
        self.relu = variant == "relu"  # ReLU attention: every attention function reads it

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)  # (B, T, H, D)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)  # (B, Hq, T, D)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        impl = self.config._attn_implementation
        attend = OWN.get(impl) or ALL_ATTENTION_FUNCTIONS.get_interface(impl, maps_attention)
        out, probs = attend(self, q, k, v, attention_mask, dropout=self.attention_dropout if self.training else 0.0,
                            scaling=self.scaling, **kwargs)  # out (B, T, Hq, D)
        if self.gate is not None:
            out = out * torch.sigmoid(self.gate(hidden_states))[..., None]  # (B, T, Hq, 1): gated attention
        return self.o_proj(out.reshape(*shape[:-2], -1).contiguous()), probs


def _sink(module) -> torch.Tensor | None:
    return getattr(module, "sinks", None)


def _relu(module) -> bool:
    return getattr(module, "relu", False)


def variant_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Fused SDPA when the normaliser is softmax (no maps), the eager variant normaliser when it is not."""
    if _sink(module) is None and not _relu(module):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return maps_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling)


def maps_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Eager attention with the variant's normaliser; returns (out (B, q, Hq, D), probs (B, Hq, q, S))."""
    q, s = query.shape[-2], key.shape[-2]
    if attention_mask is not None:
        mask = attention_mask[..., :s]
    elif q > 1:  # SDPA's mask builder leaves a plain causal mask out (is_causal): build it
        mask = torch.ones(q, s, dtype=torch.bool, device=query.device).tril(s - q)  # (q, S)
    else:
        mask = None
    out, probs = eager_attention(query, key, value, scaling, mask, _sink(module), dropout, module.training,
                                 relu=_relu(module))
    return out.transpose(1, 2).contiguous(), probs


OWN = {"sdpa": variant_attention, "eager": maps_attention}  # transformers' names -> ours, for a variant


class VariantLlamaForCausalLM(LlamaForCausalLM):
    config_class = VariantLlamaConfig

    def __init__(self, config: VariantLlamaConfig):
        super().__init__(config)
        for i, layer in enumerate(self.model.layers):
            fresh = VariantAttention(config, i)
            fresh.load_state_dict(layer.self_attn.state_dict(), strict=False)  # keep Llama's init of q/k/v/o
            layer.self_attn = fresh
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, VariantAttention) and isinstance(module.sinks, nn.Parameter):
            module.sinks.data.zero_()  # a learned sink logit starts at softmax1's 0


def sink_token_id(model: nn.Module) -> int | None:
    """The learnable sink token's id, for a sink-token model; None otherwise."""
    return getattr(model.config, "sink_token_id", None)


def register() -> None:
    """Make the variant model loadable by the Auto classes (idempotent): called where a folder is loaded,
    not at import, so importing attnlab leaves transformers' registries as they were."""
    if MODEL_TYPE not in CONFIG_MAPPING:
        AutoConfig.register(MODEL_TYPE, VariantLlamaConfig)
        AutoModelForCausalLM.register(VariantLlamaConfig, VariantLlamaForCausalLM)
