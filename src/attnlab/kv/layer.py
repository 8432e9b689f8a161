"""One layer of the evicting KV cache: its stored slots and how they are evicted.

Keys and values are (B, H_kv, S, D) tensors that really shrink; each slot keeps its stream index
(``pos``), H2O's accumulated attention (``score``) and whether it is a real token (``valid``).
:class:`attnlab.kv.cache.PolicyCache` holds one per decoder layer and says how the model reaches them.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import CacheLayerMixin

from attnlab.kv.policies import KVPolicy, SlotState
from attnlab.kv.rolling import RollingKeys
from attnlab.kv.slots import overwrite, per_slot
from attnlab.models.rotary import RopeSpec

SLOT_TENSORS = ("keys", "values", "pos", "valid", "score", "n_pad")  # what a layer stores per slot (and per row)


class PolicyLayer(CacheLayerMixin):
    """One layer's stored slots: keys/values (B, H, S, D) and, per slot, its stream index,
    accumulated attention (H2O) and whether it is a real token (not padding)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, policy: KVPolicy, rope: RopeSpec | None = None, start: int = 0, lag_limit: int = 0):
        super().__init__()
        self.policy, self.rope = policy, rope
        self.start = start  # the model's position of the stream's first token
        # evictions the kept keys may owe their rotations for (rolling positions; 0: none): only where attention
        # materialises its logits (a scored policy) and no priority reads the keys
        self.lag_limit = lag_limit if policy.needs_scores and not policy.reads_keys else 0
        self.seen = 0  # tokens this layer has seen (the stream length)
        self.n_pad = None
        self._buf: dict[str, torch.Tensor | None] = {}  # the slot tensors' buffers (see _adopt)
        self._n = 0  # S, the slots stored: the first _n of each buffer
        self._new: torch.Tensor | int = 0  # the current step's new slots: (B, H, q) indices, or the first's index
        self._q = 0  # and how many
        self.rolling = RollingKeys(rope) if rope is not None else None  # rolling positions' owed rotations

    # -- CacheLayerMixin -------------------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states):
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self._adopt(keys=key_states.new_zeros(b, h, 0, d),
                    values=value_states.new_zeros(b, h, 0, value_states.shape[-1]),
                    pos=torch.zeros(b, h, 0, dtype=torch.long, device=self.device),
                    valid=torch.zeros(b, h, 0, dtype=torch.bool, device=self.device),
                    score=torch.zeros(b, h, 0, *self.policy.score_slots(), device=self.device)
                    if self.policy.needs_scores else None)
        self.n_pad = torch.zeros(b, 1, 1, dtype=torch.long, device=self.device)
        self.any_pad = False
        self.is_initialized = True

    # -- storage: each slot tensor is a view of the first S slots of a buffer with headroom -----------------
    # Why: appending by torch.cat copies the whole cache every step, and the per-slot bookkeeping (positions,
    # validity, scores, the new slots' indices) cost four small ops per layer per step: on a GPU a small
    # model's decode step is bound by kernel launches, and each op is one more. In the headroom,
    # ``pos`` already holds the stream indices the next appended tokens will have, ``valid`` True and ``score``
    # 0, so an append writes keys and values alone.
    def _adopt(self, **slots) -> None:
        """Take ``slots`` (name -> tensor with S slots on dim 2 or -1, or None) as the buffers, no headroom."""
        self.keys, self.values = slots["keys"], slots["values"]
        self._buf = dict(slots)
        self._views: dict[str, torch.Tensor] = {}  # name -> the view _view made of its buffer (see _view)
        self._n = self.keys.shape[2]
        self._pos_offset = None  # the headroom's pos is unset

    # pos, valid, score: views of their buffers made when read, kept while the stored count stays (a steady decode
    # step reads them several times a layer, and a narrow costs what a small kernel launch does on the host)
    @property
    def pos(self) -> torch.Tensor | None:  # (B, H, S) long: each slot's stream index
        return self._view("pos")

    @property
    def valid(self) -> torch.Tensor | None:  # (B, H, S) bool: a real token, not padding
        return self._view("valid")

    @property
    def score(self) -> torch.Tensor | None:  # (B, H, S) float32: H2O's accumulated attention (None: no scores)
        return self._view("score")

    def _view(self, name: str) -> torch.Tensor | None:
        view = self._views.get(name)
        if view is None or view.shape[2] != self._n:
            buf = self._buf.get(name)
            if buf is None:
                return None
            view = self._views[name] = buf.narrow(2, 0, self._n)
        return view

    @property
    def new_slots(self) -> torch.Tensor:
        """(B, H, q) slots of the tokens of the current step."""
        if isinstance(self._new, int):
            b, h = self.keys.shape[:2]
            return self._slot_ids.narrow(0, self._new, self._q).expand(b, h, self._q)
        return self._new

    def _reserve(self, s: int, q: int) -> None:
        """Room for q more slots after the first s: regrown by half (no fewer than 64 slots), never past what
        the policy's budget needs, the headroom filled with what appended tokens will hold."""
        cap = self._buf["keys"].shape[2]
        if s + q > cap:
            limit = self.policy.capacity(self.seen + q)
            grown = max(s + q, min(int(1.5 * (s + q)) + 64, limit + q if limit is not None else 1 << 62))
            for name, buf in self._buf.items():
                if buf is not None:
                    shape = list(buf.shape)
                    shape[2] = grown
                    new = buf.new_zeros(shape) if name != "valid" else buf.new_ones(shape)
                    new[:, :, :s] = buf[:, :, :s]
                    self._buf[name] = new
            self._views = {}
            self._slot_ids = torch.arange(grown, device=self.device)
            self._pos_offset = None
        if self._pos_offset != self.seen - s:  # the headroom's stream indices: slot j holds seen - s + j
            cap = self._buf["pos"].shape[2]
            self._buf["pos"][:, :, s:] = torch.arange(self.seen, self.seen + cap - s, device=self.device)
            self._pos_offset = self.seen - s

    def _append(self, key_states, value_states) -> None:
        """Store q new tokens, (B, H, q, D) each, after the S stored slots."""
        q, s = key_states.shape[2], self._n
        self._reserve(s, q)
        buf = self._buf  # narrow, not [:, :, a:b]: a decode step calls this per layer, and indexing costs microseconds
        buf["keys"].narrow(2, s, q).copy_(key_states)
        buf["values"].narrow(2, s, q).copy_(value_states)
        self.keys, self.values = buf["keys"].narrow(2, 0, s + q), buf["values"].narrow(2, 0, s + q)
        self._n, self._new, self._q = s + q, s, q

    def update(self, key_states, value_states, *args, **kwargs):
        """Evict down to the budget, then store the step's q new tokens: (B, H, q, D) each."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, h, q, _ = key_states.shape
        cap = self.policy.capacity(self.seen)
        n_over = self.keys.shape[-2] - cap if cap is not None else 0
        # steady decoding: overwrite the evicted slot (heads that share a budget evict through _evict)
        if n_over > 0 and q == 1 and n_over == 1 and not self.policy.shares_budget():
            evict = self._priority().argmin(-1, keepdim=True)  # (B, H, 1)
            if self.rolling is not None:  # older kept keys move forward by 1, now or owed
                self.rolling.evicted(self._buf["keys"], self.pos, self.pos.gather(-1, evict), evict, self.lag_limit)
            overwrite(self, evict, key_states, value_states, self.seen)
            if self.any_pad:  # else every slot is valid already
                self.valid.scatter_(2, evict, True)
            self._new, self._q = evict, 1
        else:
            self.settle()  # what follows reads the keys as stored (or reorders them)
            if n_over > 0:
                self._evict(n_over)
            self._append(key_states, value_states)
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
        self.__init__(self.policy, self.rope, self.start, self.lag_limit)

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("an evicting KV cache cannot be cropped (assisted decoding is not supported)")

    def _map_batch(self, fn) -> None:
        if self.is_initialized:
            self.settle()
            self._adopt(**{name: None if (t := getattr(self, name)) is None else fn(t) for name in SLOT_TENSORS[:5]})
            self.n_pad = fn(self.n_pad)

    def reorder_cache(self, beam_idx):
        self._map_batch(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map_batch(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        self._map_batch(lambda t: t[indices])

    def state_dict(self) -> dict:
        if not self.is_initialized:
            return {"seen": self.seen}
        # contiguous: a view of the buffer would save its headroom too. The rotations still owed are saved as
        # owed (settling here would round differently from the stream that never stopped)
        return {"seen": self.seen, "any_pad": self.any_pad,
                "owed": None if self.rolling is None else self.rolling.owed(),
                **{k: None if (t := getattr(self, k)) is None else t.contiguous() for k in SLOT_TENSORS}}

    def load_state_dict(self, state: dict) -> None:
        self.reset()
        if "keys" in state:
            self.lazy_initialization(state["keys"], state["values"])
            # copies: steady decoding writes slots in place, the source must not change
            self._adopt(**{k: None if state[k] is None else state[k].clone() for k in SLOT_TENSORS[:5]})
            self.n_pad = state["n_pad"].clone()
            self.any_pad = state["any_pad"]
            if self.rolling is not None and state.get("owed") is not None:
                self.rolling.owe(*state["owed"])
        self.seen = state["seen"]

    # -- eviction --------------------------------------------------------------------------------
    def state(self) -> SlotState:
        return SlotState(pos=self.pos, seen=self.seen, score=self.score, first=self.n_pad, keys=self.keys)

    def _priority(self) -> torch.Tensor:  # (B, H, S); padding goes first
        priority = self.policy.priority(self.state())
        # every slot is valid unless a row was padded or a shared budget masks slots (both set any_pad)
        return priority.masked_fill(~self.valid, float("-inf")) if self.any_pad else priority

    def _evict(self, n: int) -> None:
        """Keep the S - n slots of highest priority (per batch row and KV head)."""
        s = self.keys.shape[-2]
        priority = self._priority()  # (B, H, S)
        visible = self.policy.allocate(priority, s - n) if self.policy.shares_budget() else None  # (B, H, S) bool
        width = s - n if visible is None else int(visible.sum(-1).max())  # a head may keep more than s - n
        if visible is not None:  # a head's slots past its share are stored beside them, masked
            priority = priority.masked_fill(~visible, float("-inf"))
            self.any_pad = True  # masked slots, as padding is: every step's attention must read ``valid``
        keep = priority.topk(width, dim=-1).indices.sort(-1).values  # (B, H, width)
        if self.rolling is not None:
            evicted = torch.ones_like(self.valid).scatter_(-1, keep, False)  # (B, H, S)
            order = self.pos.argsort(-1)
            ev_sorted = evicted.gather(-1, order).long()
            after_sorted = n - ev_sorted.cumsum(-1)  # evicted tokens later in the stream
            delta = torch.empty_like(after_sorted).scatter_(-1, order, after_sorted).masked_fill(evicted, 0)
            self.rolling.rotate(self._buf["keys"], delta != 0, delta)
        d = keep[..., None]
        self._adopt(keys=self.keys.gather(2, d.expand(-1, -1, -1, self.keys.shape[-1])),
                    values=self.values.gather(2, d.expand(-1, -1, -1, self.values.shape[-1])),
                    pos=self.pos.gather(-1, keep),
                    valid=self.valid.gather(-1, keep) & (True if visible is None else visible.gather(-1, keep)),
                    score=None if self.score is None else self.score.gather(2, per_slot(keep, self.score)))

    # -- rolling positions: the rotations evictions owe the kept keys (attnlab.kv.rolling) ----------------
    @property
    def rerotated(self) -> int:
        """Keys re-rotated so far (rolling positions): what the evictions have cost."""
        return 0 if self.rolling is None else self.rolling.rotated

    def settle(self) -> None:
        """Pay the rotations the stored keys owe (rolling positions): ``keys`` then hold every key as rolling
        places it. Reading the keys outside attention (``state_dict``, an analysis) needs this first."""
        if self.rolling is not None:
            self.rolling.settle(self._buf["keys"])

    def logits(self, qg: torch.Tensor) -> torch.Tensor:
        """qg (B, H, r, D) against the stored keys -> (B, H, r, S): each key as rolling places it."""
        if self.rolling is None:
            return qg @ self.keys.transpose(-1, -2)
        return self.rolling.logits(qg, self.keys)

    # -- the attention step's two updates (the attention function alone sees mask and probabilities) --
    def update_padding(self, real: torch.Tensor) -> None:
        """Mark which of this step's new tokens are real (not padding): real (B, q) bool."""
        b, h, q = self.new_slots.shape
        self.valid.scatter_(2, self.new_slots, real[:, None, :].expand(b, h, q))
        n_pad = (~real).sum(-1).view(b, 1, 1)
        self.n_pad += n_pad
        self.any_pad = self.any_pad or bool(n_pad.any())

    def update_scores(self, probs: torch.Tensor) -> None:
        """The scored policies (H2O, TOVA): fold this step's attention, probs (B, H, g, q, S), into each stored
        slot's score as the policy says (H2O adds what each slot received; TOVA keeps the last query's; SnapKV
        keeps the last w queries' apart)."""
        self.policy.fold(self.score, probs)

    # -- queries (read-only) -------------------------------------------------------------------
    def visible(self) -> torch.Tensor | None:
        """(B, H, q, S) bool: which stored slots each of this step's q queries may attend to (None: all)."""
        q = self._q
        if q == 1 and not self.any_pad:
            return None
        b, h, s = self.valid.shape
        # slot visible to query j iff real and (stored before this step, or a new token <= j)
        step = torch.full((b, h, s), -1, dtype=torch.long, device=self.device)
        step.scatter_(2, self.new_slots, torch.arange(q, device=self.device).expand(b, h, q))
        j = torch.arange(q, device=self.device).view(1, 1, q, 1)
        own = step[:, :, None, :] == j  # a padding query still sees itself: no all-masked row, no NaN
        return (self.valid[:, :, None, :] & (step[:, :, None, :] <= j)) | own
