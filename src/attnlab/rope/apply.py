"""RoPE scalings on a loaded transformers model: applied in a context, exported into its config.

``with ScaledRope(model, make_scaling("ntk", 2.0)):`` writes the scaled frequencies into the
model's rotary-embedding buffers (and YaRN's factor on cos/sin, ``attention_scaling``) and puts the
originals back on exit; ``dynamic-ntk`` recomputes them from the largest position of each forward
(a forward pre-hook that lives only inside the context). Nothing is patched at import.

``export_scaling(config, scaling)`` writes the scaling into the config's ``rope_parameters`` so a
model fine-tuned under it saves and reloads with it (each scaling names its own entries:
transformers' ``linear``, ``dynamic`` and ``yarn`` RoPE types; NTK-aware is a plain change of
``rope_theta``).

Rotary modules are found through :mod:`attnlab.models.arch`.

Composes with the KV policies by nesting, scaling outside::

    with ScaledRope(model, make_scaling("ntk", 2.0)), PolicyCache(model, policy, "rolling") as cache:
        ...
"""
from __future__ import annotations

import torch

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.models.rotary import DYNAMIC_FLAG
from attnlab.rope.scalings import RopeScaling


def _rotaries(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's rotary-embedding modules (from the architecture table), refusing models without RoPE."""
    if arch.position_kind(model) == arch.LEARNED:
        raise UsageError(f"{model.config.model_type} has no rotary position embedding (GPT-2 and OPT learn absolute "
                         "positions): RoPE scalings apply to RoPE models (Llama, SmolLM2, GPT-NeoX, ...)")
    return arch.rotary_modules(model)


def _rope_parameters(config) -> dict:
    params = getattr(config, "rope_parameters", None) or {}
    return dict(params) if "rope_theta" in params else {**params, "rope_theta": getattr(config, "rope_theta", 10000.0)}


class ScaledRope:
    """Context manager: the model runs with ``scaling``'s frequencies inside, its own outside."""

    def __init__(self, model: torch.nn.Module, scaling: RopeScaling):
        self.model, self.scaling = model, scaling
        self.rotaries = _rotaries(model)
        config = model.config.get_text_config(decoder=True)
        params = _rope_parameters(config)
        if params.get("rope_type", "default") != "default":
            raise UsageError(f"this model already uses RoPE type {params['rope_type']!r}; attnlab scales the "
                             "plain RoPE only (load a model with rope_type 'default')")
        self.base = float(params["rope_theta"])
        self.original_len = int(params.get("original_max_position_embeddings") or config.max_position_embeddings)
        self.dim = 2 * self.rotaries[0].inv_freq.numel()  # rotary dims (partial rotary respected)
        self._saved: list = []
        self._hooks: list = []

    def frequencies(self, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return self.scaling.frequencies(self.base, self.dim, self.original_len, seq_len)

    def __enter__(self) -> "ScaledRope":
        self._saved = [(m.inv_freq.clone(), m.attention_scaling) for m in self.rotaries]
        self._set(*self.frequencies())
        if self.scaling.dynamic:
            for m in self.rotaries:
                self._hooks.append(m.register_forward_pre_hook(self._follow_length, with_kwargs=True))
                setattr(m, DYNAMIC_FLAG, True)
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for m, (inv, att) in zip(self.rotaries, self._saved):
            m.inv_freq.copy_(inv)
            m.attention_scaling = att
            if hasattr(m, DYNAMIC_FLAG):
                delattr(m, DYNAMIC_FLAG)

    def _set(self, inv_freq: torch.Tensor, attention_factor: float) -> None:
        for m in self.rotaries:
            m.inv_freq.copy_(inv_freq.to(m.inv_freq.device))
            m.attention_scaling = attention_factor

    def _follow_length(self, module, args, kwargs) -> None:
        """dynamic-ntk: frequencies for the current length (largest position in this forward + 1)."""
        position_ids = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
        inv, _ = self.frequencies(int(position_ids.max()) + 1)
        module.inv_freq.copy_(inv.to(module.inv_freq.device))


def export_scaling(config, scaling: RopeScaling) -> None:
    """Write ``scaling`` into a transformers config (its text config's ``rope_parameters``), so
    ``save_pretrained`` / ``from_pretrained`` round-trip it."""
    config = config.get_text_config(decoder=True)
    params = _rope_parameters(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rot_dims = int(head_dim * params.get("partial_rotary_factor", 1.0))
    new = scaling.rope_parameters(float(params["rope_theta"]), rot_dims, config.max_position_embeddings)
    keep = {k: v for k, v in params.items() if k in ("rope_theta", "partial_rotary_factor")}
    config.rope_parameters = {**keep, **new}
