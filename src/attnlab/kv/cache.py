"""An evicting KV cache for any transformers decoder, through transformers' own two seams.

- The cache's ``update(key, value, layer_idx)``: each :class:`PolicyLayer` stores keys and values
  as (B, H_kv, S, D) tensors that really shrink; before appending a step's new tokens it evicts
  down to the policy's budget (the slots of lowest priority, per KV head). In steady decoding
  (one token in, one out) the new token is written *into the evicted slot*: no copy of the cache.
- The attention-function registry: ``attnlab_kv`` (in :mod:`attnlab.kv.attention`) attends over
  the stored slots with its own mask (stored slots are unordered after eviction, so the model's
  positional mask cannot describe them) and, for H2O, hands the layer the post-softmax attention
  each slot receives. It finds its layer as transformers' own cache does, by the attention
  module's ``layer_idx``.

A layer owns its state: only its update methods write it (``update`` stores the step's tokens;
``update_padding`` and ``update_scores`` take what only the attention step sees: which new tokens
are padding, and H2O's attention); ``visible``, ``state`` and the size queries only read.

Slots keep their stream index (``pos``), so positions can be

- ``original``: tokens keep the absolute RoPE/learned position they were computed at (what exact
  equivalence with a masked dense forward needs);
- ``rolling``: StreamingLLM's positions *inside the cache*. Only relative angles matter to RoPE,
  so instead of re-rotating every kept key each step we keep the model's own positions for new
  tokens and queries and rotate, at each eviction, only the kept keys *older* than an evicted
  token, forward by the number of evicted tokens after them (R(a)R(b) = R(a+b)). The query then
  sees every kept key at its rank distance. For sinks+window only the sinks move: O(n_sink).
  With ``lag_limit`` the keys may instead owe those rotations for a few evictions, paid through the
  query (:mod:`attnlab.kv.rolling`).

Nothing is patched: ``with PolicyCache(model, policy) as cache`` switches the model's attention
implementation to ``attnlab_kv`` and binds its attention modules (from :mod:`attnlab.models.arch`)
to this cache, and undoes both on exit. Pinned to transformers 5.23.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from attnlab.core.errors import UsageError
from attnlab.kv.attention import ATTN_NAME, BOUND
from attnlab.kv.attention import register as register_attention
from attnlab.kv.layer import PolicyLayer
from attnlab.kv.policies import POSITIONS, KVPolicy
from attnlab.models import arch
from attnlab.models.rotary import RopeSpec, is_dynamic
from attnlab.models.variants import sink_token_id

__all__ = ["POSITIONS", "PolicyCache", "check_sink_slot"]


def _rolling_rope(model: torch.nn.Module) -> RopeSpec:
    """The rotation rolling positions re-rotate kept keys with; refused where there is none to use."""
    if arch.position_kind(model) == arch.LEARNED:
        raise UsageError(f"rolling positions re-rotate RoPE keys, but {model.config.model_type} has learned absolute "
                         "positions (as GPT-2 and OPT do): use --positions original")
    if is_dynamic(model):
        raise UsageError("rolling positions re-rotate keys with fixed RoPE frequencies, but dynamic NTK "
                         "changes them with the length: use --positions original or a static scaling")
    return RopeSpec.of(model)


def check_sink_slot(model: torch.nn.Module, policy: KVPolicy) -> None:
    """A model pre-trained with a sink token must keep it: refuse an evicting policy with no sink slot."""
    if sink_token_id(model) is not None and policy.needs_budget and getattr(policy, "n_sink", 0) < 1:
        raise UsageError(f"this model was pre-trained with a sink token, which {policy.describe()} would evict: "
                         "keep its slot with --policy sinks (or sinks+h2o) and --n-sink 1 or more")


class PolicyCache(Cache):
    """A transformers ``Cache`` whose layers evict by ``policy``; use as a context manager::

        with PolicyCache(model, make_policy("sinks", budget=256), positions="rolling") as cache:
            out = model.generate(**inputs, past_key_values=cache, max_new_tokens=50)
    """

    def __init__(self, model: torch.nn.Module, policy: KVPolicy, positions: str = "original", start: int = 0,
                 lag_limit: int = 0):
        """``start``: the model's position of the stream's first token (far out: a stream met deep into it).
        ``lag_limit``: with rolling positions and a scored policy, evictions the kept keys may owe their rotations
        for, paid through the query (:mod:`attnlab.kv.rolling`); 0 rotates them at each eviction."""
        if positions not in POSITIONS:
            raise UsageError(f"unknown positions {positions!r}: choose original or rolling")
        if positions == "rolling" and policy.shares_budget():
            raise UsageError(f"{policy.describe()} shares a layer's budget over its heads, which keep masked slots "
                             "that rolling positions cannot rank: use positions original (`positions=original` in its "
                             "--method)")
        if not isinstance(lag_limit, int) or lag_limit < 0:
            raise UsageError(f"lag_limit {lag_limit!r}: give a whole number of evictions >= 0 (0: rotate at each)")
        rope = _rolling_rope(model) if positions == "rolling" else None
        n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
        # each layer evicts by its own share of the policy (PyramidKV spreads the budget; the others are one)
        super().__init__(layers=[PolicyLayer(policy.for_layer(i, n_layers), rope, start, lag_limit)
                                 for i in range(n_layers)])
        self.model, self.policy, self.positions = model, policy, positions
        self._saved_impl: str | None = None
        self._bound: list[torch.nn.Module] = []  # the attention modules this context binds
        self._saved_bound: list = []

    def __enter__(self) -> "PolicyCache":
        register_attention()
        self._saved_impl = self.model.config._attn_implementation
        self._bound = [arch.attention(self.model, i).module for i in range(len(self.layers))]
        self._saved_bound = [BOUND.get(m) for m in self._bound]  # an enclosing cache's, restored on exit
        for m in self._bound:
            BOUND[m] = self
        self.model.set_attn_implementation(ATTN_NAME)
        return self

    def __exit__(self, *exc) -> None:
        self.model.set_attn_implementation(self._saved_impl)
        for m, prev in zip(self._bound, self._saved_bound):
            if prev is None:
                del BOUND[m]
            else:
                BOUND[m] = prev

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        return self.layers[layer_idx].update(key_states, value_states)

    def state_dict(self) -> dict:
        """What every layer stores and the stream's length. ``load_state_dict`` of it into a fresh cache
        of the same model, policy and positions resumes the stream exactly where it stopped (``torch.save``
        it to carry a long stream across processes)."""
        return {"policy": self.policy.describe(), "positions": self.positions,
                "layers": [layer.state_dict() for layer in self.layers]}

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or not {"policy", "positions", "layers"} <= state.keys():
            raise UsageError("not a cache state: give what PolicyCache.state_dict() returned (or torch.load of it)")
        saved = (state["policy"], state["positions"], len(state["layers"]))
        if saved != (self.policy.describe(), self.positions, len(self.layers)):
            raise UsageError(f"this cache state was saved from {saved[0]}, {saved[1]} positions, {saved[2]} layers; "
                             "resume it into a cache of the same policy, positions and model")
        for layer, s in zip(self.layers, state["layers"]):
            layer.load_state_dict(s)

    def kv_bytes(self) -> int:
        """Bytes of the stored keys and values, all layers (a growing layer's buffers keep headroom beyond them)."""
        return sum(l.keys.nbytes + l.values.nbytes for l in self.layers if l.is_initialized)

    def stored(self, layer_idx: int = 0) -> int:
        layer = self.layers[layer_idx]
        return layer.keys.shape[-2] if layer.is_initialized else 0

    def kept_mask(self, layer_idx: int, length: int) -> torch.Tensor:
        """(B, H, length) bool: which of the stream's first ``length`` tokens each KV head of one layer can still
        attend -- not a slot a shared budget masks (Ada-KV), nor padding."""
        layer = self.layers[layer_idx]
        pos = layer.pos.where(layer.valid & (layer.pos < length), length)  # (B, H, S): the rest to a spare column
        held = torch.zeros(*pos.shape[:2], length + 1, dtype=torch.bool, device=pos.device)
        return held.scatter_(-1, pos, True)[..., :length]

    def kept_positions(self, layer_idx: int) -> torch.Tensor:
        """(B, H, S) stream indices of the stored tokens of one layer, sorted."""
        return self.layers[layer_idx].pos.sort(-1).values
