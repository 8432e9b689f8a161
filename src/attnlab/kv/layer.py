"""One layer of the evicting KV cache: its stored slots and how they are evicted.

Keys and values are (B, H_kv, S, D) tensors that really shrink; each slot keeps its stream index
(``pos``), H2O's accumulated attention (``score``) and whether it is a real token (``valid``).
:class:`attnlab.kv.cache.PolicyCache` holds one per decoder layer and says how the model reaches them.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import CacheLayerMixin

from attnlab.kv.policies import KVPolicy, SlotState
from attnlab.models.rotary import RopeSpec

SLOT_TENSORS = ("keys", "values", "pos", "valid", "score", "n_pad")  # what a layer stores per slot (and per row)


class PolicyLayer(CacheLayerMixin):
    """One layer's stored slots: keys/values (B, H, S, D) and, per slot, its stream index,
    accumulated attention (H2O) and whether it is a real token (not padding)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, policy: KVPolicy, rope: RopeSpec | None = None, start: int = 0):
        super().__init__()
        self.policy, self.rope = policy, rope
        self.start = start  # the model's position of the stream's first token
        self.seen = 0  # tokens this layer has seen (the stream length)
        self.pos = self.score = self.valid = self.n_pad = None
        self.new_slots: torch.Tensor | None = None  # (B, H, q) slots of the tokens of the current step
        self.stored_before = 0  # S before the current step's update (the model's mask is sized on it)

    # -- CacheLayerMixin -------------------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states):
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(b, h, 0, d)
        self.values = value_states.new_zeros(b, h, 0, value_states.shape[-1])
        self.pos = torch.zeros(b, h, 0, dtype=torch.long, device=self.device)
        self.valid = torch.zeros(b, h, 0, dtype=torch.bool, device=self.device)
        self.score = torch.zeros(b, h, 0, dtype=torch.float32, device=self.device) if self.policy.needs_scores else None
        self.n_pad = torch.zeros(b, 1, 1, dtype=torch.long, device=self.device)
        self.any_pad = False
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        """Evict down to the budget, then store the step's q new tokens: (B, H, q, D) each."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, h, q, _ = key_states.shape
        self.stored_before = self.keys.shape[-2]
        cap = self.policy.capacity(self.seen)
        n_over = self.keys.shape[-2] - cap if cap is not None else 0
        new_pos = torch.arange(self.seen, self.seen + q, device=self.device).expand(b, h, q)
        if n_over > 0 and q == 1 and n_over == 1:  # steady decoding: overwrite the evicted slot
            evict = self._priority().argmin(-1, keepdim=True)  # (B, H, 1)
            if self.rope is not None:
                ev_pos = self.pos.gather(-1, evict)
                self._rerotate(self.pos < ev_pos, 1)  # older kept keys move forward by 1
            d_idx = evict[..., None]
            self.keys.scatter_(2, d_idx.expand(-1, -1, -1, self.keys.shape[-1]), key_states)
            self.values.scatter_(2, d_idx.expand(-1, -1, -1, self.values.shape[-1]), value_states)
            self.pos.scatter_(2, evict, new_pos)
            self.valid.scatter_(2, evict, True)
            if self.score is not None:
                self.score.scatter_(2, evict, 0.0)
            self.new_slots = evict
        else:
            if n_over > 0:
                self._evict(n_over)
            s = self.keys.shape[-2]
            self.keys = torch.cat([self.keys, key_states], dim=-2)
            self.values = torch.cat([self.values, value_states], dim=-2)
            self.pos = torch.cat([self.pos, new_pos], dim=-1)
            self.valid = torch.cat([self.valid, self.valid.new_ones(b, h, q)], dim=-1)
            if self.score is not None:
                self.score = torch.cat([self.score, self.score.new_zeros(b, h, q)], dim=-1)
            self.new_slots = torch.arange(s, s + q, device=self.device).expand(b, h, q)
        self.seen += q
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # Sized on the slots stored now, offset so that new token j reads column `seen + j` of the
        # 2-D padding mask: the attention function reads each new token's validity there.
        s = self.keys.shape[-2] if self.is_initialized else 0
        return s + query_length, self.start + self.seen - s

    def get_seq_length(self) -> int:
        return self.start + self.seen  # positions continue from the stream length (rolling is done by rotation)

    def get_max_length(self) -> int:
        cap = self.policy.capacity(self.seen)
        return -1 if cap is None else cap

    def reset(self) -> None:
        self.__init__(self.policy, self.rope, self.start)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("an evicting KV cache cannot be cropped (assisted decoding is not supported)")

    def _map_batch(self, fn) -> None:
        if self.is_initialized:
            for name in SLOT_TENSORS:
                t = getattr(self, name)
                if t is not None:
                    setattr(self, name, fn(t))

    def reorder_cache(self, beam_idx):
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        self._map_batch(lambda t: t[indices])

    def state_dict(self) -> dict:
        if not self.is_initialized:
            return {"seen": self.seen}
        return {"seen": self.seen, "any_pad": self.any_pad, **{k: getattr(self, k) for k in SLOT_TENSORS}}

    def load_state_dict(self, state: dict) -> None:
        self.reset()
        if "keys" in state:
            self.lazy_initialization(state["keys"], state["values"])
            for k in SLOT_TENSORS:  # copies: steady decoding writes slots in place, the source must not change
                setattr(self, k, None if state[k] is None else state[k].clone())
            self.any_pad = state["any_pad"]
        self.seen = state["seen"]

    # -- eviction --------------------------------------------------------------------------------
    def state(self) -> SlotState:
        return SlotState(pos=self.pos, seen=self.seen, score=self.score, first=self.n_pad, keys=self.keys)

    def _priority(self) -> torch.Tensor:  # (B, H, S); padding goes first
        return self.policy.priority(self.state()).masked_fill(~self.valid, float("-inf"))

    def _evict(self, n: int) -> None:
        """Keep the S - n slots of highest priority (per batch row and KV head)."""
        s = self.keys.shape[-2]
        keep = self._priority().topk(s - n, dim=-1).indices.sort(-1).values  # (B, H, S-n)
        if self.rope is not None:
            evicted = torch.ones_like(self.valid).scatter_(-1, keep, False)  # (B, H, S)
            order = self.pos.argsort(-1)
            ev_sorted = evicted.gather(-1, order).long()
            after_sorted = n - ev_sorted.cumsum(-1)  # evicted tokens later in the stream
            delta = torch.empty_like(after_sorted).scatter_(-1, order, after_sorted).masked_fill(evicted, 0)
            self._rerotate(delta != 0, delta)
        d = keep[..., None]
        self.keys = self.keys.gather(2, d.expand(-1, -1, -1, self.keys.shape[-1]))
        self.values = self.values.gather(2, d.expand(-1, -1, -1, self.values.shape[-1]))
        self.pos, self.valid = self.pos.gather(-1, keep), self.valid.gather(-1, keep)
        if self.score is not None:
            self.score = self.score.gather(-1, keep)

    def _rerotate(self, moved: torch.Tensor, delta: torch.Tensor | int) -> None:
        """Rotate the stored keys where ``moved`` (B, H, S) forward by ``delta`` positions (one int,
        or a (B, H, S) tensor)."""
        flat = self.keys.view(-1, self.keys.shape[-1])  # (B*H*S, D): one linear index is cheaper than three
        idx = moved.reshape(-1).nonzero().squeeze(1)
        if idx.numel():
            d = delta if isinstance(delta, int) else delta.reshape(-1)[idx]
            flat.index_copy_(0, idx, self.rope.rotate(flat.index_select(0, idx), d))

    # -- the attention step's two updates (the attention function alone sees mask and probabilities) --
    def update_padding(self, real: torch.Tensor) -> None:
        """Mark which of this step's new tokens are real (not padding): real (B, q) bool."""
        b, h, q = self.new_slots.shape
        self.valid.scatter_(2, self.new_slots, real[:, None, :].expand(b, h, q))
        n_pad = (~real).sum(-1).view(b, 1, 1)
        self.n_pad += n_pad
        self.any_pad = self.any_pad or bool(n_pad.any())

    def update_scores(self, received: torch.Tensor) -> None:
        """H2O: add the attention each stored slot received this step, (B, H, S)."""
        self.score += received

    # -- queries (read-only) -------------------------------------------------------------------
    def visible(self) -> torch.Tensor | None:
        """(B, H, q, S) bool: which stored slots each of this step's q queries may attend to (None: all)."""
        b, h, s = self.valid.shape
        q = self.new_slots.shape[-1]
        if q == 1 and not self.any_pad:
            return None
        # slot visible to query j iff real and (stored before this step, or a new token <= j)
        step = torch.full((b, h, s), -1, dtype=torch.long, device=self.device)
        step.scatter_(2, self.new_slots, torch.arange(q, device=self.device).expand(b, h, q))
        j = torch.arange(q, device=self.device).view(1, 1, q, 1)
        own = step[:, :, None, :] == j  # a padding query still sees itself: no all-masked row, no NaN
        return (self.valid[:, :, None, :] & (step[:, :, None, :] <= j)) | own
