"""A decode step captured once: transformers' StaticCache and ``torch.compile`` of the one-token forward.

    dec = CompiledDecode(model, max_len=T + steps)   # weights as they are: fp32, bf16, QuantizedWeights inside
    dec = CompiledDecode(model, max_len, wrapper="cpp")  # the graph's kernels called from C++, not Python
    logits = dec.prefill(ids)                        # ids (1, T) -> (1, vocab) at the last position, eager
    logits = dec.step(token)                         # token (1, 1) -> (1, vocab), the compiled graph

Why: at batch 1 on a CPU an eager step of transformers' Llama is hundreds of small operations dispatched from
Python around the weight reads (norms, rotary, the cache's concatenations, the int8 kernel's dtype casts);
with a cache of fixed shape the whole step is one graph, and inductor fuses the small operations into a few
loops and keeps the matrix products as calls to the same kernels (``benchmarks/bench_llamacpp.py`` measures
what it pays against llama.cpp). The graph is compiled on the first step (tens of seconds for a 30-layer
model on 2 cores) and reused while shapes hold: the cache's length is fixed at ``max_len``.

Two costs of a compiled step that are not its kernels, both paid on every step (bench_llamacpp times them):
- Dynamo's guards: before each call it checks the model's every module and parameter against the ones it
  compiled for. The step keeps only the guards on its own inputs (the token, its position, grad mode); a model
  changed since the step was built (a method entered or left, a module swapped) is caught once per sequence
  instead, at ``prefill``, which compares the model's modules and their forwards with those at construction.
- The graph's wrapper: inductor calls the graph's few hundred kernels from generated Python by default;
  ``wrapper="cpp"`` generates C++ for that too (inductor's ``cpp_wrapper``), which costs minutes more to
  compile once (inductor keeps it on disk) and takes a per-step Python loop away.

The full cache here: an evicting cache's shapes hold only once it is full, and its compiled step is
:class:`attnlab.kv.steady.CompiledPolicyDecode`, a subclass that changes the cache and its attention. What else a
compiled step cannot run is each method's ``static_step()`` (attnlab.methods). The same tokens in, the same
logits out as the eager DynamicCache decode, to float rounding (tests/models/test_compiled.py).
"""
from __future__ import annotations

import os
import shutil
import time
import types

import torch
from torch import nn
from transformers import AttentionInterface, StaticCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from attnlab.core.errors import UsageError
from attnlab.core.weights import ATTR

ATTN_NAME = "attnlab_grouped"
WRAPPERS = ("python", "cpp")  # what calls the compiled graph's kernels (inductor's cpp_wrapper for "cpp")


def grouped_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """One new token's attention over a static cache, query (B, Hq, 1, D), key/value (B, Hkv, S, D), the mask
    (B, 1, 1, S) bool; -> (B, 1, Hq, D). Why not SDPA: with a mask (a static cache needs one) transformers
    repeats each KV head for its group of query heads, a copy of the whole cache every layer every step, and
    SDPA takes its math path. Here a group's heads stack into one matmul against their shared KV head.
    Longer queries (the prefill) are SDPA's."""
    b, hq, q, d = query.shape
    if q > 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    hkv, s = key.shape[1], key.shape[2]
    qg = query.reshape(b, hkv, hq // hkv, d)  # (B, Hkv, g, D): head h reads KV head h // g
    logits = (qg @ key.transpose(-1, -2)) * scaling  # (B, Hkv, g, S)
    if attention_mask is not None:
        logits = logits.masked_fill(~attention_mask.view(b, 1, 1, s), float("-inf"))
    out = torch.softmax(logits, dim=-1) @ value  # (B, Hkv, g, D)
    return out.reshape(b, 1, hq, d), None


def register() -> None:
    """Make ``attnlab_grouped`` an attention implementation transformers knows (idempotent)."""
    if ATTN_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTN_NAME, grouped_attention)
        AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


class CompiledDecode:
    """Greedy-ready decode of one sequence (batch 1) through a static cache of ``max_len`` positions."""

    def __init__(self, model: nn.Module, max_len: int, wrapper: str = "python"):
        check_wrapper(wrapper)
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            require_compiler()
        self._register_attention()
        self.model, self.max_len = model, max_len
        self.cache = self._new_cache()
        self.pos = 0
        self._token = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        self._built = _fingerprint(model)
        options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe,  # prefill checks
                   "cpp_wrapper": wrapper == "cpp"}
        # fullgraph: the step is one graph or an error. A graph break would compile the rest of the forward as
        # frames of the model's own (shared) code, where the skipped module guards could hand one model's graph
        # to another model's step; a method that breaks the graph is refused before (static_step()).
        self._step = torch.compile(types.MethodType(_own_code(CompiledDecode._forward), self), dynamic=False,
                                   fullgraph=True, options=options)

    # -- what a subclass with another cache changes (attnlab.kv.steady): the cache, its attention, what reaches it --
    attn_name = ATTN_NAME  # the attention implementation the step runs under

    _register_attention = staticmethod(register)  # makes attn_name known to transformers

    def _new_cache(self):
        return StaticCache(config=self.model.config, max_cache_len=self.max_len)

    def _attention_kwargs(self) -> dict:
        """What the model hands its attention function besides the tensors (transformers passes a forward's extra
        keyword arguments down to it)."""
        return {}

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """ids (1, n), pos (n,) their positions -> (1, vocab) logits at the last one; the model's attention is
        ``attn_name`` for the call only (the model outside is as it was). no_grad inside, not as a
        decorator: Dynamo skips torch's decorator frame and would cache the graph on this function's shared
        code object, not on the instance's own copy (_own_code)."""
        config = self.model.config
        before, config._attn_implementation = config._attn_implementation, self.attn_name
        try:
            with torch.no_grad():
                out = self.model(ids, past_key_values=self.cache, cache_position=pos, position_ids=pos[None],
                                 logits_to_keep=1, use_cache=True, **self._attention_kwargs())
        finally:
            config._attn_implementation = before
        return out.logits[:, -1]

    def _positions(self, n: int) -> torch.Tensor:
        if self.max_len is not None and self.pos + n > self.max_len:
            raise UsageError(f"the static cache holds {self.max_len} positions and {self.pos + n} were asked: "
                             "give CompiledDecode a larger max_len")
        pos = torch.arange(self.pos, self.pos + n, device=self.device)  # the cache's write positions: its device
        self.pos += n
        return pos

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Start the sequence afresh: ids (1, T) -> (1, vocab) logits at position T - 1 (eager: one call of
        its own shape would cost a compile of its own)."""
        self._check_model()
        self.cache.reset()
        self.pos = 0
        return self._forward(ids, self._positions(ids.shape[1]))

    def _check_model(self) -> None:
        """The step keeps no guards on the model: this is its check, once a sequence."""
        if _fingerprint(self.model) != self._built:
            raise UsageError(f"the model changed since this {type(self).__name__} was built (a method entered or "
                             "left, a module swapped): build a new one for the model as it is now")

    def warm(self, ids: torch.Tensor) -> float:
        """Compile the step now, on ids (1, >= 1) (its first token, twice): the seconds it took (a timed decode
        after it times no compile; its prefill starts afresh)."""
        t0 = time.perf_counter()
        self.prefill(ids[:, :1])
        self.step(ids[:, :1])
        return time.perf_counter() - t0

    def kv_bytes(self) -> int:
        """Bytes of the static cache: all of it is allocated, and each step's attention reads all of it."""
        return sum(t.nbytes for layer in self.cache.layers for t in (layer.keys, layer.values) if t is not None)

    @torch.no_grad()  # one grad mode at every call: a change is a guard failure, a second compile
    def step(self, token: torch.Tensor) -> torch.Tensor:
        """token (1, 1) -> (1, vocab) logits for the next position, through the compiled graph."""
        # into one buffer: a token sliced from a prompt has the prompt's strides, a guard failure (a recompile)
        self._token.copy_(token.view(1, 1))
        try:
            return self._step(self._token, self._positions(1))
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as e:  # compiling: before any kernel
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"the model's decode step does not compile into one graph ({first}): decode it "
                             "eager, or leave out the method that breaks the graph") from e

    def greedy(self, ids: torch.Tensor, max_new: int, eos: set[int] = frozenset(), prompted=None) -> torch.Tensor:
        """ids (1, T) -> (1, n) greedy tokens, n <= max_new: stops after an ``eos`` token, as generate does.
        ``prompted()``, if given, is called once the prompt's forward is done (a clock: prompt and decode apart)."""
        new = [int(self.prefill(ids)[0].argmax())]
        if prompted is not None:
            prompted()
        while len(new) < max_new and new[-1] not in eos:
            new.append(int(self.step(torch.tensor([new[-1:]]))[0].argmax()))
        return torch.tensor([new])


def check_wrapper(wrapper: str, flag: str = "wrapper") -> None:
    """A UsageError unless ``wrapper`` is one of WRAPPERS; ``flag`` names where it was given."""
    if wrapper not in WRAPPERS:
        raise UsageError(f"{flag} {wrapper!r}: give one of {', '.join(WRAPPERS)}")


def _own_code(fn: types.FunctionType) -> types.FunctionType:
    """fn with a code object of its own. Dynamo keeps its graphs per code object, and without guards on the
    model one CompiledDecode's graph would pass for another's: each instance compiles, and keeps, its own."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _fingerprint(model: nn.Module) -> tuple:
    """What the compiled step took as fixed: each module, the forward set on it (a method's, e.g. QuantForward),
    and the quantized weight a scheme keeps on it (attnlab.core.weights.ATTR)."""
    return tuple((id(m), id(m.__dict__.get("forward")), id(getattr(m, ATTR, None))) for m in model.modules())


def require_compiler() -> None:
    """A UsageError unless a C++ compiler is on PATH: inductor builds the CPU step's loops with one."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++", "c++"]
    if not any(shutil.which(n) for n in names):
        raise UsageError("compiling the decode step needs a C++ compiler (g++ or clang++ on PATH, or CXX set): "
                         "install one, or decode without compiling")
