"""An evicting cache's steady decode step as one compiled graph: sinks, H2O, TOVA and the other policies whose
budget is a fixed token count, at batch 1, once the cache is full.

    dec = CompiledPolicyDecode(model, make_policy("h2o", budget=1024), "rolling")
    logits = dec.prefill(ids)      # ids (1, T): eager, through PolicyCache
    logits = dec.step(token)       # eager until every layer is full, then the compiled graph

Why: an eager step evicts with a dozen small operations a layer (the priority, its argmin, the scatters into
the evicted slot; with rolling positions the re-rotation's nonzero, gather, rotation and scatter), and on a
2-core CPU each costs several times its warm cost once the weights have streamed through the caches: H2O with
rolling positions decodes 10-12% slower a step than sinks (benchmarks/bench_kv_decode.py). Once the cache is
full its shapes stop changing -- every step evicts one slot and writes the new token into it -- so the step
is one static graph, and inductor fuses the eviction's small operations into a few loops. Rolling positions'
re-rotation becomes one pass over the layer's keys, ``where(older, R(1) k, k)``: no shape that depends on the
data, the same work whether 4 keys moved (sinks) or 500 (H2O).

The eager PolicyCache streams until every layer holds its steady count (budget + 1 slots: the budget kept and
the new token), then its slots are copied into the static buffers and the compiled step takes over. The same
kept slots and logits as the eager cache, step by step, to float rounding (tests/kv/test_steady.py).
"""
from __future__ import annotations

import time

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.masking_utils import AttentionMaskInterface

from attnlab.core.errors import UsageError
from attnlab.kv.attention import materialised
from attnlab.kv.cache import PolicyCache
from attnlab.kv.layer import PolicyLayer
from attnlab.kv.policies import KVPolicy, SlotState
from attnlab.kv.slots import overwrite
from attnlab.models.compiled import CompiledDecode

ATTN_NAME = "attnlab_steady"


class SteadyLayer(CacheLayerMixin):
    """One layer's slots at their steady count S, in buffers of fixed shape: keys/values (1, H, S, D), and per
    slot its stream index, score (scored policies) and the stream length, all tensors (a Python int would be a
    constant of the graph, a recompile every step)."""

    is_compileable, is_sliding = True, False

    def __init__(self, policy: KVPolicy, rope, like: PolicyLayer):
        """Buffers shaped as ``like``'s slots (an eager layer at its steady count); ``load`` fills them."""
        super().__init__()
        self.policy, self.rope = policy, rope
        self.keys, self.values = torch.empty_like(like.keys), torch.empty_like(like.values)  # (1, H, S, D)
        self.pos = torch.empty_like(like.pos)  # (1, H, S) long
        self.score = None if like.score is None else torch.empty_like(like.score)  # (1, H, S, ...) float32
        self.first = torch.empty_like(like.n_pad)  # (1, 1, 1) long: the stream's first real token
        self.seen = torch.zeros((), dtype=torch.long, device=self.keys.device)  # the stream's length
        self.is_initialized = True
        if rope is not None:  # RopeSpec makes R(1)'s cos/sin on first use: here, not inside the graph, where adding
            rope.rotate(like.keys[0, 0, :1], 1)  # them to its dict would fail the next call's guard (a second compile)

    def lazy_initialization(self, key_states, value_states) -> None:  # made whole from an eager layer (above)
        pass

    def load(self, like: PolicyLayer) -> None:
        """Take an eager layer's slots (at the steady count, rotations paid) into the buffers, in place."""
        like.settle()
        for name in ("keys", "values", "pos", "score"):
            if getattr(self, name) is not None:
                getattr(self, name).copy_(getattr(like, name))
        self.first.copy_(like.n_pad)
        self.seen.fill_(like.seen)

    def update(self, key_states, value_states, *args, **kwargs):
        """Evict one slot and store the new token there, key/value (1, H, 1, D): PolicyLayer's steady step."""
        state = SlotState(pos=self.pos, seen=self.seen, score=self.score, first=self.first, keys=self.keys)
        evict = self.policy.priority(state).argmin(-1, keepdim=True)  # (1, H, 1)
        if self.rope is not None:  # rolling positions: the kept keys older than the evicted one move forward by 1
            older = (self.pos < self.pos.gather(-1, evict))[..., None]  # (1, H, S, 1)
            flat = self.keys.view(-1, self.keys.shape[-1])
            self.keys.copy_(torch.where(older, self.rope.rotate(flat, 1).view_as(self.keys), self.keys))
        overwrite(self, evict, key_states, value_states, self.seen)
        self.seen += 1
        return self.keys, self.values

    def logits(self, qg: torch.Tensor) -> torch.Tensor:
        """qg (1, H, r, D) against the stored keys -> (1, H, r, S) (attnlab.kv.attention.materialised reads it)."""
        return qg @ self.keys.transpose(-1, -2)

    def update_scores(self, probs: torch.Tensor) -> None:
        self.policy.fold(self.score, probs)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[2], 0  # unread: every stored slot is visible to the one query (steady_mask)

    def get_seq_length(self) -> int:
        return self.keys.shape[2]

    def get_max_length(self) -> int:
        return self.keys.shape[2]


def steady_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, steady=None, **kwargs):
    """One token's attention over a SteadyLayer's slots, query (1, Hq, 1, D) -> (1, 1, Hq, Dv), the
    probabilities folded into the slots' scores as the eager cache's attention folds them."""
    layer = steady.layers[module.layer_idx]
    out = materialised(module, query, value, layer, None, scaling)
    return out.transpose(1, 2).contiguous(), None


def steady_mask(*args, **kwargs) -> None:
    """No mask: at batch 1 in steady decoding every stored slot is a real token the query may read."""
    return None


def register() -> None:
    """Make ``attnlab_steady`` an attention implementation transformers knows (idempotent)."""
    if ATTN_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTN_NAME, steady_attention)
        AttentionMaskInterface.register(ATTN_NAME, steady_mask)


def check_steady(policy: KVPolicy) -> None:
    """A UsageError unless ``policy`` has a steady step one static graph holds (KVPolicy.steady_step)."""
    if (why := policy.steady_step()) is not None:
        raise UsageError(f"{policy.describe()} {why}: decode it eager")


class CompiledPolicyDecode(CompiledDecode):
    """Greedy-ready decode of one stream (batch 1) through an evicting cache: eager until every layer is full,
    then one compiled graph a step. ``positions``: original or rolling, as PolicyCache takes them."""

    attn_name = ATTN_NAME
    _register_attention = staticmethod(register)

    def __init__(self, model, policy: KVPolicy, positions: str = "rolling", wrapper: str = "python",
                 chunk: int = 512):
        """``chunk``: the prompt's tokens a forward in ``prefill`` (a scored policy materialises each chunk's
        attention over everything stored: a 4k prompt in one forward would be gigabytes a layer)."""
        check_steady(policy)
        self.policy, self.positions, self.chunk = policy, positions, chunk
        self.eager: PolicyCache | None = None  # the stream's cache until it is full
        super().__init__(model, max_len=None, wrapper=wrapper)

    def _new_cache(self) -> None:
        return None  # the static buffers: made at the first steady step (shaped as the full cache), reused after

    def _policy_cache(self) -> PolicyCache:
        return PolicyCache(self.model, self.policy, self.positions)

    def _attention_kwargs(self) -> dict:
        return {"steady": self.cache}

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Start the stream afresh: ids (1, T) -> (1, vocab) logits at position T - 1, eager."""
        if ids.shape[0] != 1:
            raise UsageError(f"a compiled decode streams one sequence: got a batch of {ids.shape[0]}")
        self._check_model()
        self.pos = 0
        self.eager = self._policy_cache()
        for s in range(0, ids.shape[1], self.chunk):
            logits = self._eager(ids[:, s:s + self.chunk])
        return logits

    def _eager(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (1, n) through the eager cache -> (1, vocab) logits at the last one."""
        self._positions(ids.shape[1])  # the stream's length (the cache keeps its own)
        with self.eager, torch.no_grad():
            return self.model(ids, past_key_values=self.eager, logits_to_keep=1).logits[:, -1]

    @torch.no_grad()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """token (1, 1) -> (1, vocab) logits for the next position: eager while a layer still fills, compiled after."""
        if self.eager is not None and not all(_full(layer) for layer in self.eager.layers):
            return self._eager(token.view(1, 1))
        if self.eager is not None:  # full: its slots move into the static buffers, the graph decodes from here
            self._enter_steady()
        return super().step(token)

    def _enter_steady(self) -> None:
        if self.cache is None:
            rope = self.eager.layers[0].rope
            self.cache = Cache(layers=[SteadyLayer(layer.policy, rope, layer) for layer in self.eager.layers])
        for mine, like in zip(self.cache.layers, self.eager.layers):
            mine.load(like)
        self.eager = None

    def warm(self, ids: torch.Tensor) -> float:
        """Compile the step now, on ids (1, T): eager up to the first steady step, then that step; ids shorter than
        that are repeated (any tokens build the same graph). The seconds it took; prefill starts afresh after."""
        t0 = time.perf_counter()
        need = self.fills_at()
        ids = ids.repeat(1, need // ids.shape[1] + 1)  # (1, > need)
        self.prefill(ids[:, :need])
        self.step(ids[:, need:need + 1])
        return time.perf_counter() - t0

    def fills_at(self) -> int:
        """The stream length at which every layer holds its steady count (its budget + 1): the next step compiles."""
        return max(layer.policy.capacity(1) for layer in self._policy_cache().layers) + 1

    def kv_bytes(self) -> int:
        if self.eager is not None:
            return self.eager.kv_bytes()
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in self.cache.layers)


def _full(layer: PolicyLayer) -> bool:
    """The layer holds its steady count: the budget kept and one new token (PolicyLayer.update's steady path)."""
    return layer.is_initialized and layer.keys.shape[2] == layer.policy.capacity(layer.seen) + 1

