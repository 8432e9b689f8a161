"""Hugging Face causal LMs in the training lab: a Llama-style decoder built from a
``LlamaConfig``, or any local causal-LM folder, seen through the trainer's model protocol
``forward(x (B, T), attentions) -> (logits (B, T, V), [attention (B, H, T, T) per layer])``.

Training steps run transformers' SDPA attention (fused, no maps). Only when the trainer asks for
maps (its probe) is the model switched to the eager implementation, the one that materialises
softmax(QKᵀ/√d), and switched back after: same function, same numbers (a test checks it).
Checkpoints are standard folders (config.json + model.safetensors + tokenizer files) that
``AutoModelForCausalLM.from_pretrained`` loads.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.activations import ACT2FN
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.utils import logging as hf_logging

from attnlab.core.errors import ConfigError, UsageError, first_line
from attnlab.core.io import staged_dir
from attnlab.core.metrics import position_norm_ratio
from attnlab.core.variant_names import VARIANTS
from attnlab.models import arch, variants
from attnlab.models.variants import VariantLlamaConfig, VariantLlamaForCausalLM, sink_token_id


@dataclass(frozen=True)
class LlamaLMConfig:
    """A small Llama: pre-RMSNorm blocks, RoPE, gated MLP, grouped-query attention (as SmolLM2).

    The MLP is down(act(gate(x)) * up(x)); ``act`` is transformers' ``hidden_act``: "silu" (SwiGLU,
    SmolLM2's), "relu" (exact zeros wherever gate(x) < 0: the naturally sparse setting of Deja Vu's
    OPT models) or "gelu" (GeGLU). ``attention`` is one of :data:`attnlab.core.variant_names.VARIANTS`;
    a ``sink-token`` model's sink is the id ``sink_token_id`` (a vocabulary entry of its own)."""

    vocab_size: int
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2  # each KV head serves n_heads / n_kv_heads query heads
    d_ffn: int = 768
    max_len: int = 1024  # max_position_embeddings: the context it is trained for
    rope_theta: float = 10000.0
    dropout: float = 0.0  # on attention probabilities (Llama has no other dropout)
    tie_embeddings: bool = True
    eos_id: int | None = None
    act: str = "silu"
    attention: str = "softmax"
    sink_token_id: int | None = None

    def __post_init__(self):
        if min(self.vocab_size, self.d_model, self.n_layers, self.n_heads, self.n_kv_heads, self.d_ffn,
               self.max_len) < 1:
            raise ConfigError("vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ffn and max_len must be >= 1")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size "
                              "(RoPE rotates pairs of dimensions)")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if not 0.0 <= self.dropout < 1.0 or not self.rope_theta > 0:
            raise ConfigError(f"dropout={self.dropout}, rope_theta={self.rope_theta}: need 0 <= dropout < 1, theta > 0")
        if self.act not in ACT2FN:
            raise ConfigError(f"act={self.act!r} is not a transformers activation: use silu, relu or gelu")
        if self.attention not in VARIANTS:
            raise ConfigError(f"attention={self.attention!r}: use one of {', '.join(VARIANTS)}")
        if self.attention == "sink-token" and not (self.sink_token_id is not None
                                                   and 0 <= self.sink_token_id < self.vocab_size):
            raise ConfigError(f"a sink-token model needs sink_token_id in [0, vocab_size={self.vocab_size}): a "
                              "vocabulary entry of its own")

    def to_hf(self) -> LlamaConfig:
        if self.attention != "softmax":  # a variant: the attnlab_llama type, which saves and reloads it
            extra = {"sink_token_id": self.sink_token_id} if self.attention == "sink-token" else {}
            return VariantLlamaConfig(attention_variant=self.attention, **extra, **self._llama_kwargs())
        return LlamaConfig(**self._llama_kwargs())

    def _llama_kwargs(self) -> dict:
        return dict(
            vocab_size=self.vocab_size, hidden_size=self.d_model, intermediate_size=self.d_ffn,
            num_hidden_layers=self.n_layers, num_attention_heads=self.n_heads, num_key_value_heads=self.n_kv_heads,
            max_position_embeddings=self.max_len, attention_dropout=self.dropout, hidden_act=self.act,
            tie_word_embeddings=self.tie_embeddings, bos_token_id=self.eos_id, eos_token_id=self.eos_id,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta})


class CausalLM(nn.Module):
    """Wraps a ``*ForCausalLM`` so the trainer (and its checkpoints) can use it."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf = hf_model

    @property
    def cfg(self) -> str:
        """What a resumed run must match: the model's config without transformers' bookkeeping."""
        d = self.hf.config.to_dict()
        for k in ("transformers_version", "_name_or_path", "dtype", "torch_dtype", "architectures"):
            d.pop(k, None)
        return json.dumps(d, sort_keys=True, default=str)

    def forward(self, x: torch.Tensor, attentions: bool = True) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if not attentions:
            return self.hf(input_ids=x, use_cache=False).logits, []
        impl = self.hf.config._attn_implementation
        self.hf.set_attn_implementation("eager")  # the only one that returns the probabilities
        try:
            out = self.hf(input_ids=x, use_cache=False, output_attentions=True)
        finally:
            self.hf.set_attn_implementation(impl)
        return out.logits, list(out.attentions)  # [(B, H, T, T)] per layer

    @property
    def sink_token_id(self) -> int | None:
        """The id a sink-token model's every sample starts with (the trainer prepends it); None otherwise."""
        return sink_token_id(self.hf)

    @torch.no_grad()
    def probe_stats(self, x: torch.Tensor) -> dict:
        """What the trainer's probe records beyond the maps: per layer, the residual stream's norm at
        position 0 over the mean norm at the others (massive activations sit on the first token). x: (B, T).
        Read at the decoder layers' outputs: transformers' last hidden state is after the final norm."""
        outs: list[torch.Tensor] = []
        keep = lambda module, args, out: outs.append(out[0] if isinstance(out, tuple) else out)  # noqa: E731
        hooks = [layer.register_forward_hook(keep) for layer in arch.layers(self.hf)]
        try:
            self.hf(input_ids=x, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        return {"norm0_ratio": [float(position_norm_ratio(h)) for h in outs]}  # h: (B, T, d)

    def save_pretrained(self, folder: str | Path, tokenizer=None) -> Path:
        """Write a standard checkpoint folder (with the tokenizer's files), replacing it whole: the
        new folder is complete before the old one is moved aside, so a kill never leaves neither."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with staged_dir(folder) as stage, no_progress_bars():
            self.hf.save_pretrained(str(stage))
            if tokenizer is not None:
                tokenizer.save(stage)
        return folder


def build_llama(cfg: LlamaLMConfig) -> CausalLM:
    """A freshly initialised Llama (transformers' init: N(0, 0.02) weights) from our config."""
    hf = cfg.to_hf()
    return CausalLM(VariantLlamaForCausalLM(hf) if isinstance(hf, VariantLlamaConfig) else LlamaForCausalLM(hf))


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars ("Loading weights", "Writing model shards") off for one load or save (on
    every from_pretrained and save_pretrained they drown our own progress and our one-line errors), then as
    they were: the switch is process-wide, so it is not left flipped."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def causal_lm_config(path: str | Path, hint: str = ""):
    """The config of a local model folder, or a one-line error if it is not a causal LM."""
    variants.register()  # an attnlab_llama folder (a run's model/) is then one transformers knows
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - an unreadable or unknown config surfaces as many exception types
        raise UsageError(f"model {path}: cannot read its config.json ({first_line(e)})") from None
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise UsageError(f"model {path} ({config.model_type}) is not a causal language model: give a "
                         f"*ForCausalLM checkpoint (Llama, GPT-2, GPT-NeoX, OPT, ...){hint}")
    return config


def load_causal_lm(path: str | Path) -> CausalLM:
    """Any local causal-LM checkpoint folder, in float32 for training."""
    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise UsageError(f"model {path}: no config.json there; give a Hugging Face model folder "
                         "(e.g. the model/ folder of an attnlab train run)")
    causal_lm_config(path)
    try:
        with no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - missing or corrupt weights surface as many exception types
        raise UsageError(f"model {path}: cannot load its weights ({first_line(e)})") from None
    return CausalLM(model)

