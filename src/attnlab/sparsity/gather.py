"""Weight layouts for computing only the kept MLP neurons: per-step gathers and the active-set cache.

SparseMLP's layers (:mod:`attnlab.sparsity.mlp_layers`) compute h_S = act(gate_S(x)) * up_S(x) and
h_S @ W_down^T[S] for a neuron set S in one of two ways:

- per-step gather ("gather" mode; ``rows_linear``, ``rows_matmul``): every step the rows of S of W_gate and
  W_up are ``index_select``-ed into one :class:`Scratch` buffer that the layers share; W_down is read as
  rows of a transposed copy made once, which at batch 1 ``embedding_bag`` sums in place, weighted by h_S
  (PowerInfer's axpy; no copy), and at batch > 1 are copied once for one GEMM over the union of the rows'
  sets (SparseMLP computes a step densely instead when that union is too large, ``mlp.DENSE_ABOVE``). The
  copies cost memory traffic of their own, so what gathering gains depends on where the weights sit: one
  SmolLM2-sized layer read from memory, as decode reads it, is about 1.5x faster than dense at keep 50%;
  one whose weights sit in the CPU's cache is slower than dense (``benchmarks/bench_sparse_mlp.py``).
  ``input_sparse`` does the same for input units: TEAL's kept channels of x (rows of W_gate^T, W_up^T) and
  of h entering down_proj.
- ``ActiveSet`` ("cached" mode, neuron rules): a per-layer buffer holding S's rows contiguously (gate and
  up rows interleaved, so one GEMM computes both; W_down's columns as rows of its transpose). Each step
  overwrites only the slots of the neurons that left with the rows of those that entered, so the copy
  costs (changed neurons) rows, not |S|; a static set is copied once. It pays only when consecutive tokens
  share most of their neurons (Deja Vu's observation): on SmolLM2 a token shares 0.56 of its top-50% set
  with the next (chance 0.5), and there the cache is slower than the per-step gather (the benchmark).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core import weights
from attnlab.models import arch


def union(mask: torch.Tensor) -> torch.Tensor:
    """mask (N, n) -> (u,) long: the units any row keeps."""
    return mask.any(0).nonzero().squeeze(1)


class Scratch:
    """The buffer per-step gathers copy weight rows into, shared by every layer of a SparseMLP: layers run
    one after another and each copy is consumed before the next. A fresh tensor per gather costs the
    allocator's page faults every step (a Llama-2-7B layer's kept rows are ~90 MB): measured, that made
    gathering 3.6x slower than dense at that size (``benchmarks/bench_sparse_mlp.py``)."""

    def __init__(self):
        self.buf: torch.Tensor | None = None

    def rows(self, w: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """w[index] (u, k), copied into the buffer (valid until the next call)."""
        return torch.index_select(w.detach(), 0, index, out=self.take(w, index.numel()))

    def take(self, w: torch.Tensor, u: int) -> torch.Tensor:
        """A (u, k) view of the buffer for u of w's rows, in w's dtype (valid until the next call)."""
        buf, need = self.buf, u * w.shape[1]
        if buf is None or buf.numel() < need or buf.dtype != w.dtype or buf.device != w.device:
            self.buf = buf = w.new_empty(max(w.numel(), need))  # the whole weight: never regrown for it
        return buf[:need].view(u, w.shape[1])


def _gather(w: torch.Tensor, rows: torch.Tensor, scratch: Scratch | None) -> torch.Tensor:
    return w.index_select(0, rows) if scratch is None else scratch.rows(w, rows)


def rows_linear(x: torch.Tensor, proj: nn.Module, rows: torch.Tensor, scratch: Scratch | None = None) -> torch.Tensor:
    """x (N, d) -> (N, u): only the output units ``rows`` (u,) of projection ``proj`` (where it is quantized, its
    scheme's rows: int8's are a quarter of the bytes per kept neuron)."""
    bias = proj.bias.index_select(0, rows) if proj.bias is not None else None
    wq = weights.of(proj)
    if wq is not None:
        return wq.rows(rows, scratch).linear(x, bias)
    return F.linear(x, _gather(arch.weight(proj), rows, scratch), bias)  # W[rows] (u, d)


def transposed(proj: nn.Module):
    """The projection read by input units: its weight transposed (in, out) as a contiguous copy, or, where it
    is quantized, its scheme's columns (``weights.Columns``; int8's: the int8 copy transposed)."""
    wq = weights.of(proj)
    return arch.weight(proj).detach().T.contiguous() if wq is None else wq.columns()


def rows_matmul(v_u: torch.Tensor, w_t, rows: torch.Tensor, bias, scratch: Scratch | None = None) -> torch.Tensor:
    """v_u (N, u) @ W_t[rows] (u, o) + bias: only the rows of the transposed weight for units ``rows``.
    One row (batch-1 decode): ``embedding_bag`` sums the rows in place, weighted by v (PowerInfer's axpy),
    without copying them; for more rows one copy serves a GEMM, faster than N passes over the rows.
    A quantized ``w_t`` (a scheme's ``weights.Columns``): its own product over those rows."""
    if not isinstance(w_t, torch.Tensor):
        out = w_t.rows_product(v_u, rows)  # (N, o)
    elif rows.numel() == 0:  # nothing kept (every unit below its threshold): the product is 0
        out = v_u.new_zeros(v_u.shape[0], w_t.shape[1])  # (N, o); embedding_bag refuses an empty bag
    elif v_u.shape[0] == 1:
        out = F.embedding_bag(rows[None], w_t, per_sample_weights=v_u, mode="sum")  # (1, o)
    else:
        out = v_u @ _gather(w_t, rows, scratch)  # (N, o)
    return out if bias is None else out + bias


def input_sparse(v: torch.Tensor, mask: torch.Tensor | None, w_t, bias,
                 scratch: Scratch | None = None) -> torch.Tensor:
    """v (N, m) @ W_t (m, o) + bias reading only the rows of W_t for input units some row keeps
    (each row's own dropped units zeroed first): TEAL's input channels and its h entering down_proj."""
    if mask is None:
        return F.linear(v, w_t.T, bias) if isinstance(w_t, torch.Tensor) else w_t.dense(v, bias)
    rows = union(mask)  # (u,)
    return rows_matmul((v * mask).index_select(1, rows), w_t, rows, bias, scratch)


class ActiveSet:
    """One layer's active-set cache. ``w_in``: the g source weights (n, d) whose rows are the neurons'
    inputs (gate then up; a plain MLP: in); ``w_out_t`` (n, o): neuron j's column of the output projection
    as a row (a transposed copy). ``b_in``: their g biases (n,) or None. The buffers' first ``m`` slots
    hold the active neurons (``neurons``), gate and up rows interleaved: buf_in (cap, g, d)."""

    def __init__(self, w_in: tuple, w_out_t: torch.Tensor, b_in: tuple | None = None):
        self.w_in, self.w_out_t, self.b_in = tuple(w_in), w_out_t, b_in
        self.n, self.d = self.w_in[0].shape
        self.slot_of = torch.full((self.n,), -1, dtype=torch.long, device=w_out_t.device)  # (n,) neuron -> slot
        self.m = 0
        self.steps = self.entered = self.kept = 0  # what the updates reused and copied
        self._resize(0)

    @classmethod
    def from_mlp(cls, mlp: arch.MLP) -> "ActiveSet":
        """The cache of ``arch.MLP`` ``mlp``: reads its own weights; W_out^T is a copy made once."""
        projs = [mlp.gate_proj, mlp.in_proj] if mlp.gate_proj is not None else [mlp.in_proj]
        w_in = tuple(arch.weight(p).detach() for p in projs)  # g x (n, d)
        b_in = None if all(p.bias is None for p in projs) else tuple(
            p.bias.detach() if p.bias is not None else w_in[0].new_zeros(w_in[0].shape[0]) for p in projs)
        return cls(w_in, arch.weight(mlp.out_proj).detach().T.contiguous(), b_in)  # W_out^T (n, o)

    def _resize(self, cap: int) -> None:
        """Buffers of ``cap`` slots, the first ``m`` carried over."""
        g, w = len(self.w_in), self.w_out_t
        new = (w.new_empty(cap, g, self.d), w.new_empty(cap, w.shape[1]),  # (cap, g, d), (cap, o)
               None if self.b_in is None else w.new_empty(cap, g),  # (cap, g)
               torch.full((cap,), -1, dtype=torch.long, device=w.device))  # (cap,) slot -> neuron
        self.scratch = w.new_empty(cap, max(self.d, w.shape[1]))  # (cap, max(d, o)): rows on their way in
        if self.m:
            for buf, old in zip(new, (self.buf_in, self.buf_out, self.buf_b, self.neurons_at)):
                if buf is not None:
                    buf[:self.m] = old[:self.m]
        self.buf_in, self.buf_out, self.buf_b, self.neurons_at = new

    @property
    def neurons(self) -> torch.Tensor:
        """(m,) long: the neuron held in each active slot, in slot order."""
        return self.neurons_at[:self.m]

    def _put(self, slots: torch.Tensor, neurons: torch.Tensor) -> None:
        """Copy the source rows of ``neurons`` (s,) into ``slots`` (s,)."""
        # index_copy_ of index_select'ed rows: several times faster on a CPU than ``buf[slots] = w[neurons]``;
        # the rows pass through a scratch buffer allocated with the cache (a fresh tensor of a 7B layer's
        # rows would cost the allocator's page faults every step)
        s = slots.numel()
        for j, w in enumerate(self.w_in):
            rows = torch.index_select(w, 0, neurons, out=self.scratch[:s, :self.d])  # (s, d)
            self.buf_in[:, j].index_copy_(0, slots, rows)
            if self.buf_b is not None:
                self.buf_b[:, j].index_copy_(0, slots, self.b_in[j].index_select(0, neurons))
        rows = torch.index_select(self.w_out_t, 0, neurons, out=self.scratch[:s, :self.w_out_t.shape[1]])  # (s, o)
        self.buf_out.index_copy_(0, slots, rows)
        self.neurons_at.index_copy_(0, slots, neurons)
        self.slot_of.index_copy_(0, neurons, slots)

    def update(self, keep: torch.Tensor) -> None:
        """Make the active set ``keep`` (n,) bool: overwrite the leaving neurons' slots with the entering
        ones' rows; a shrinking set moves its last slots into the holes so the m active slots stay a prefix."""
        held = self.slot_of >= 0  # (n,)
        enter = (keep & ~held).nonzero().squeeze(1)  # (e,)
        leaving = (held & ~keep).nonzero().squeeze(1)  # (l,)
        e, l = enter.numel(), leaving.numel()
        self.steps, self.entered, self.kept = self.steps + 1, self.entered + e, self.kept + self.m - l
        if e == 0 and l == 0:
            return
        free = self.slot_of[leaving].sort().values  # (l,) slots to reuse, lowest first
        self.slot_of[leaving] = -1
        m_new = self.m + e - l
        if m_new > self.buf_in.shape[0]:
            self._resize(min(self.n, max(m_new, 2 * self.buf_in.shape[0])))
        if e >= l:
            slots = torch.cat([free, torch.arange(self.m, m_new, device=free.device)])  # (e,)
        else:  # the e lowest free slots are all < m_new; the other holes below m_new take the tail's rows
            slots, holes = free[:e], free[e:]
            tail = torch.arange(m_new, self.m, device=free.device)
            movers = tail[self.slot_of[self.neurons_at[tail]] == tail]  # tail slots still held
            self._put(holes[holes < m_new], self.neurons_at[movers].clone())
        self._put(slots, enter)
        self.neurons_at[m_new:self.m] = -1
        self.m = m_new

    def forward_in(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, d) -> (N, m, g): the active neurons' gate and up (or in) pre-activations, one GEMM."""
        m, g = self.m, self.buf_in.shape[1]
        bias = None if self.buf_b is None else self.buf_b[:m].reshape(m * g)
        return F.linear(x, self.buf_in[:m].view(m * g, self.d), bias).view(x.shape[0], m, g)  # (N, m, g)

    def forward_out(self, h_m: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """h_m (N, m) -> (N, o): the active neurons' contribution through the output projection."""
        out = h_m @ self.buf_out[:self.m]  # (N, o)
        return out if bias is None else out + bias

    def reuse(self) -> float:
        """The share of each new set that was already held (copied for free), over every update so far
        (the first update, which loads the whole set, included)."""
        held = self.kept + self.entered
        return self.kept / held if held else float("nan")
