"""Rolling positions for one evicting cache layer: the rotations an eviction owes the kept keys, paid at once or
lazily through the query.

With rolling positions (StreamingLLM's positions *inside* the cache) an eviction at stream index e moves every
kept key older than e one rank closer to the query, so each of those keys owes one more rotation by +1
(R(a)R(b) = R(a + b)). Paid at once, that is a gather, a rotation and a scatter of the keys that moved: for
sinks + window only the sinks move (the evicted token is the oldest past them), but H2O's evicted token is
younger than nearly all its heavy hitters, so paying at once re-rotates about half the cache every step.

Paid lazily, each slot counts what it owes (``lag``, an int per slot) and attention turns the *query* instead:
q·R(o)k = (R(-o)q)·k. The query is turned back by every o in 0..turns (one small matmul), scored against the
stored keys in one taller matmul over the same keys, and each key's logit is taken at its own o. After
``limit`` evictions the owed rotations are paid in one pass (settled), so the query's rows stay few. The logits
are today's up to float rounding, so a policy's choices are too. Only where attention materialises logits anyway
(the scored policies: H2O, TOVA, SnapKV); SDPA takes no per-key rotation.

Owing is opt-in (``PolicyCache(..., lag_limit=4)``): on the 2-core CPU measured (the "rotations owed" row of
benchmarks/bench_kv_decode.py) it rotates far fewer keys, yet the turned query, the taller matmul, the take
and the settles cost about what they save. A GPU is where it should pay: each small op there is a launch, the
taller matmul nearly free, and rotating at once waits on the host at every layer (``nonzero``), owing once in
``lag_limit`` evictions. Not yet measured there (``benchmarks/bench_stream_loop.py`` times both).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.models.rotary import RopeSpec


class RollingKeys:
    """One layer's owed rotations. ``buf`` below is the layer's key buffer (B, H, C, D), C >= S: the stored
    keys are its first S slots."""

    def __init__(self, rope: RopeSpec):
        self.rope = rope
        self.rotated = 0  # keys re-rotated so far: what the evictions have cost
        self.lag: torch.Tensor | None = None  # (B, H, S) long: rotations each stored key still owes
        self.turns = 0  # evictions since the last settle: no key owes more
        self._index: dict[tuple, torch.Tensor] = {}  # (B, H, r, S, m) -> (B, H, r, S) base of the logits' take

    def evicted(self, buf: torch.Tensor, pos: torch.Tensor, ev_pos: torch.Tensor, evict: torch.Tensor,
                limit: int) -> None:
        """One eviction in steady decoding: slot ``evict`` (B, H, 1), stream index ``ev_pos`` (B, H, 1), takes the
        new token; the kept keys older than it (``pos`` (B, H, S)) owe +1. ``limit``: evictions they may owe it
        for (0: rotate them now)."""
        older = pos < ev_pos  # (B, H, S)
        if limit <= 0:
            self.rotate(buf, older, 1)
            return
        if self.turns >= limit:
            self.settle(buf)
        if self.turns == 0 and (self.lag is None or self.lag.shape != pos.shape):
            self.lag = torch.zeros_like(pos)
        self.lag.add_(older)
        self.lag.scatter_(2, evict, 0)  # the slot's new token owes nothing
        self.turns += 1

    def owed(self) -> tuple[torch.Tensor, int] | None:
        """What the keys owe now, a copy (for a saved stream): (lag (B, H, S), turns), or None."""
        return (self.lag.clone(), self.turns) if self.turns else None

    def owe(self, lag: torch.Tensor, turns: int) -> None:
        """Take on what :meth:`owed` gave (a resumed stream)."""
        self.lag, self.turns = lag.clone(), turns

    def settle(self, buf: torch.Tensor) -> None:
        """Pay every owed rotation: the stored keys become exactly what paying at once would have left."""
        if self.turns:
            self.rotate(buf, self.lag != 0, self.lag, most=self.turns)
            self.lag.zero_()
            self.turns = 0

    def rotate(self, buf: torch.Tensor, moved: torch.Tensor, delta: torch.Tensor | int,
               most: int | None = None) -> None:
        """Rotate the stored keys where ``moved`` (B, H, S) forward by ``delta`` positions (one int, or a
        (B, H, S) tensor, in 0..``most`` if given)."""
        pad = buf.shape[2] - moved.shape[-1]
        if pad:  # the flags (and shifts) laid out as the buffer is
            moved = F.pad(moved, (0, pad))
            delta = delta if isinstance(delta, int) else F.pad(delta, (0, pad))
        flat = buf.view(-1, buf.shape[-1])  # (B*H*C, D): one linear index is cheaper than three
        idx = moved.reshape(-1).nonzero().squeeze(1)
        self.rotated += idx.numel()
        if idx.numel():
            d = delta if isinstance(delta, int) else delta.reshape(-1)[idx]
            flat.index_copy_(0, idx, self.rope.rotate(flat.index_select(0, idx), d, most))

    def logits(self, qg: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """qg (B, H, r, D) against keys (B, H, S, D) -> (B, H, r, S), each key as if its owed rotation were paid."""
        if not self.turns:
            return qg @ keys.transpose(-1, -2)
        b, h, r, d = qg.shape
        s, m = keys.shape[2], self.turns + 1
        turned = self.rope.turn_back(qg.reshape(-1, d), m).view(b, h, r * m, d)  # rows (r, o): R(-o) q
        every = turned @ keys.transpose(-1, -2)  # (B, H, r*m, S): every key against every turn
        key = (b, h, r, s, m)
        if key not in self._index:  # flat index of row (j, o=0), column x
            rows = torch.arange(b * h * r, device=qg.device).view(b, h, r, 1) * (m * s)
            self._index[key] = rows + torch.arange(s, device=qg.device)
        # each key's own turn: row o = lag, o rows of S further on
        return every.take(torch.add(self._index[key], self.lag[:, :, None, :], alpha=s))
