"""The architecture table: where each supported model family keeps its parts, written as data.

One row per family (TransformerLens' component mapping, without its weight conversion). Paths are
attribute paths: ``layers``, ``final_norm``, ``embed``, ``pos_embed``, ``lm_head`` and ``rotary``
from the ``*ForCausalLM`` model; every other path from one decoder layer. Methods and probes find
modules through the functions below, never by class name:

    layers(model)          the decoder layers (an nn.ModuleList)
    attention(model, i)    Attention(module, q, k, v, qkv, o): separate q/k/v, or one fused qkv
    mlp(model, i)          MLP(module, in_proj, gate_proj, out_proj, act, act_fn)
    norms(model, i)        Norms(attn, mlp): the norms in front of attention and MLP
    final_norm, embeddings, lm_head, rotary_modules, position_kind, dims

The MLP computes ``out_proj(act_fn(in_proj(x)))``, or for ``gated-silu`` (SwiGLU)
``out_proj(act_fn(gate_proj(x)) * in_proj(x))``. GPT-2's projections are ``Conv1D``, whose weight
is stored (in, out): :func:`weight` returns every projection's weight as (out, in).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from attnlab.core.errors import UsageError

# MLP activation kinds; a gated family's kind is "gated-" + its config's hidden_act (a ReLU Llama: gated-relu)
GATED_SILU, GATED_RELU, GELU, RELU = "gated-silu", "gated-relu", "gelu", "relu"
# position kinds: RoPE on every head dimension, RoPE on the first part of each head, learned absolute
ROPE, PARTIAL_ROPE, LEARNED = "rope", "partial-rope", "learned"


@dataclass(frozen=True)
class Arch:
    """One family's row. ``mlp`` is "" where the MLP's projections sit on the layer itself (OPT)."""

    family: str  # config.model_type
    layers: str
    attn: str
    q: str | None
    k: str | None
    v: str | None
    qkv: str | None  # fused q/k/v projection (GPT-NeoX, GPT-2): q, k and v are None
    o: str
    mlp: str
    mlp_in: str
    mlp_gate: str | None
    mlp_out: str
    act: str  # GATED_SILU, GELU or RELU
    act_fn: str
    attn_norm: str
    mlp_norm: str
    final_norm: str
    embed: str
    pos_embed: str | None  # learned absolute positions
    lm_head: str
    rotary: str | None  # the rotary-embedding module shared by every layer
    position: str  # ROPE or LEARNED (partial RoPE is read off the rotary module: position_kind)
    flat_mlp: bool = False  # the layer flattens (B, T, d) to (B*T, d) around its MLP (OPT)


_LLAMA = Arch(
    family="llama", layers="model.layers", attn="self_attn", q="self_attn.q_proj", k="self_attn.k_proj",
    v="self_attn.v_proj", qkv=None, o="self_attn.o_proj", mlp="mlp", mlp_in="mlp.up_proj",
    mlp_gate="mlp.gate_proj", mlp_out="mlp.down_proj", act=GATED_SILU, act_fn="mlp.act_fn",
    attn_norm="input_layernorm", mlp_norm="post_attention_layernorm", final_norm="model.norm",
    embed="model.embed_tokens", pos_embed=None, lm_head="lm_head", rotary="model.rotary_emb", position=ROPE)

ARCHS: dict[str, Arch] = {
    **{f: replace(_LLAMA, family=f) for f in ("llama", "mistral", "qwen2", "qwen3", "attnlab_llama")},
    "gpt_neox": Arch(
        family="gpt_neox", layers="gpt_neox.layers", attn="attention", q=None, k=None, v=None,
        qkv="attention.query_key_value", o="attention.dense", mlp="mlp", mlp_in="mlp.dense_h_to_4h", mlp_gate=None,
        mlp_out="mlp.dense_4h_to_h", act=GELU, act_fn="mlp.act", attn_norm="input_layernorm",
        mlp_norm="post_attention_layernorm", final_norm="gpt_neox.final_layer_norm", embed="gpt_neox.embed_in",
        pos_embed=None, lm_head="lm_head", rotary="gpt_neox.rotary_emb", position=ROPE),
    "gpt2": Arch(
        family="gpt2", layers="transformer.h", attn="attn", q=None, k=None, v=None, qkv="attn.c_attn",
        o="attn.c_proj", mlp="mlp", mlp_in="mlp.c_fc", mlp_gate=None, mlp_out="mlp.c_proj", act=GELU,
        act_fn="mlp.act", attn_norm="ln_1", mlp_norm="ln_2", final_norm="transformer.ln_f", embed="transformer.wte",
        pos_embed="transformer.wpe", lm_head="lm_head", rotary=None, position=LEARNED),
    "opt": Arch(
        family="opt", layers="model.decoder.layers", attn="self_attn", q="self_attn.q_proj", k="self_attn.k_proj",
        v="self_attn.v_proj", qkv=None, o="self_attn.out_proj", mlp="", mlp_in="fc1", mlp_gate=None, mlp_out="fc2",
        act=RELU, act_fn="activation_fn", attn_norm="self_attn_layer_norm", mlp_norm="final_layer_norm",
        final_norm="model.decoder.final_layer_norm", embed="model.decoder.embed_tokens",
        pos_embed="model.decoder.embed_positions", lm_head="lm_head", rotary=None, position=LEARNED, flat_mlp=True),
}


class Attention(NamedTuple):
    module: nn.Module  # called once per layer; carries layer_idx
    q: nn.Module | None
    k: nn.Module | None
    v: nn.Module | None
    qkv: nn.Module | None  # fused (d -> 3 d) where q, k, v are None
    o: nn.Module


class MLP(NamedTuple):
    module: nn.Module  # the MLP module (the decoder layer itself for OPT)
    in_proj: nn.Module  # d -> d_ff
    gate_proj: nn.Module | None  # d -> d_ff (gated-silu only)
    out_proj: nn.Module  # d_ff -> d
    act: str
    act_fn: nn.Module


class Norms(NamedTuple):
    attn: nn.Module
    mlp: nn.Module


class Embeddings(NamedTuple):
    tokens: nn.Embedding
    positions: nn.Module | None  # learned absolute positions (GPT-2, OPT)


class Dims(NamedTuple):
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int


def arch_of(model: nn.Module) -> Arch:
    """The row for ``model``'s family (its ``config.model_type``)."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None) if config is not None else None
    if family not in ARCHS:
        raise UsageError(f"{type(model).__name__} (config.model_type {family!r}) is not in attnlab's architecture "
                         f"table: supported families are {', '.join(ARCHS)} (add a row to attnlab.models.arch.ARCHS)")
    return ARCHS[family]


def _get(root: nn.Module, path: str | None) -> nn.Module | None:
    """The module at a dotted path ("" is ``root``); None for no path or an attribute set to None."""
    if path is None:
        return None
    mod = root
    for part in filter(None, path.split(".")):
        mod = getattr(mod, part)
        if mod is None:
            return None
    return mod


def layers(model: nn.Module) -> nn.ModuleList:
    return model.get_submodule(arch_of(model).layers)


def layer(model: nn.Module, i: int) -> nn.Module:
    """Decoder layer ``i`` (a UsageError, not an IndexError, when out of range)."""
    stack = layers(model)
    if not 0 <= i < len(stack):
        raise UsageError(f"layer index {i} is out of range: this model has {len(stack)} layers (0..{len(stack) - 1})")
    return stack[i]


def attention(model: nn.Module, i: int) -> Attention:
    a, block = arch_of(model), layer(model, i)
    return Attention(*(_get(block, p) for p in (a.attn, a.q, a.k, a.v, a.qkv, a.o)))


def mlp(model: nn.Module, i: int) -> MLP:
    a, block = arch_of(model), layer(model, i)
    return MLP(_get(block, a.mlp), _get(block, a.mlp_in), _get(block, a.mlp_gate), _get(block, a.mlp_out),
               _act_kind(model, a), _get(block, a.act_fn))


def mlp_projections(model: nn.Module) -> list[nn.Module]:
    """Every layer's MLP projections (gate where the family has one, in, out): what a gathering sparse MLP reads
    in part, the rows of the neurons it keeps."""
    return [p for i in range(len(layers(model))) for m in (mlp(model, i),)
            for p in (m.gate_proj, m.in_proj, m.out_proj) if p is not None]


def _act_kind(model: nn.Module, a: Arch) -> str:
    """The row's activation kind, read from the config for gated MLPs (``attnlab train --act relu``)."""
    hidden_act = getattr(model.config, "hidden_act", None)
    return f"gated-{hidden_act}" if a.mlp_gate is not None and isinstance(hidden_act, str) else a.act


def norms(model: nn.Module, i: int) -> Norms:
    a, block = arch_of(model), layer(model, i)
    return Norms(_get(block, a.attn_norm), _get(block, a.mlp_norm))


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm after the last layer (None for the OPT variants without one, e.g. opt-350m)."""
    return _get(model, arch_of(model).final_norm)


def embeddings(model: nn.Module) -> Embeddings:
    a = arch_of(model)
    return Embeddings(_get(model, a.embed), _get(model, a.pos_embed))


def lm_head(model: nn.Module) -> nn.Module:
    return _get(model, arch_of(model).lm_head)


def rotary_modules(model: nn.Module) -> list[nn.Module]:
    """The model's rotary-embedding modules (one, shared by every layer); [] with learned positions."""
    a = arch_of(model)
    return [] if a.rotary is None else [_get(model, a.rotary)]


def position_kind(model: nn.Module) -> str:
    """ROPE, PARTIAL_ROPE (fewer rotary dims than head dims, as GPT-NeoX) or LEARNED."""
    mods = rotary_modules(model)
    if not mods:
        return LEARNED
    return PARTIAL_ROPE if 2 * mods[0].inv_freq.numel() < dims(model).head_dim else ROPE


def weight(proj: nn.Module) -> torch.Tensor:
    """A projection's weight as (out, in), whether nn.Linear or GPT-2's Conv1D (stored (in, out))."""
    return proj.weight.T if isinstance(proj, Conv1D) else proj.weight


def dims(model: nn.Module) -> Dims:
    """The sizes the table's modules have, read from the model's text config (d_ff from its MLP)."""
    cfg = model.config.get_text_config(decoder=True)
    n_heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    d_ff = weight(mlp(model, 0).out_proj).shape[1]
    return Dims(cfg.num_hidden_layers, cfg.hidden_size, n_heads, getattr(cfg, "num_key_value_heads", None) or n_heads,
                head_dim, d_ff, cfg.vocab_size)
