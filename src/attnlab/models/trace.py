"""Named activations of any model in the architecture table: TransformerLens-style hook points.

Hook points (B batch, T tokens in this forward, S keys attended: T without a cache, past + T with
one; d model width, H query heads, d_h head width, d_ff MLP width):

    embed                    (B, T, d)       token embeddings (the embedding module's output)
    blocks.{i}.resid_pre     (B, T, d)       the residual stream entering layer i
    blocks.{i}.attn.in       (B, T, d)       attention's input (after its norm)
    blocks.{i}.attn.pattern  (B, H, T, S)    attention probabilities softmax(q kᵀ / √d_h + mask)
    blocks.{i}.attn.z        (B, T, H, d_h)  each head's output: the input of the output projection
    blocks.{i}.attn.out      (B, T, d)       attention's output (after the output projection)
    blocks.{i}.mlp.in        (B, T, d)       the MLP's input (after its norm)
    blocks.{i}.mlp.pre       (B, T, d_ff)    in_proj(x) (for gated MLPs, the "up" half)
    blocks.{i}.mlp.post      (B, T, d_ff)    the input of the MLP's output projection: act(in(x)),
                                             or act(gate(x)) · in(x) for gated MLPs
    blocks.{i}.mlp.out       (B, T, d)       the MLP's output (after its output projection)
    blocks.{i}.resid_post    (B, T, d)       the residual stream leaving layer i
    final_norm               (B, T, d)       after the final norm: the LM head's input

GPT-NeoX adds attention and MLP in parallel: its ``mlp.in`` is a norm of ``resid_pre``. Names take
glob patterns (``blocks.*.mlp.post``). Usage::

    with Trace(model, ["blocks.*.mlp.post", "blocks.0.attn.pattern"]) as tr:
        model(ids)
    tr["blocks.1.mlp.post"]  # (B, T, d_ff), detached; each forward overwrites the previous one's

With ``on=callback`` nothing is stored: each hook calls ``callback(name, tensor)`` as the forward
reaches it (detached, not copied: read it before returning), so a stream of long-text chunks holds one
layer's attention pattern at a time (``attnlab.probes``).

Only the requested points get a hook, and every hook is removed on exit. A pattern needs the
probabilities, which only transformers' eager attention materialises: while a pattern is traced
the model runs eager attention (the same function, equal logits up to float rounding), and its
own implementation is restored on exit.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry
from attnlab.models import arch


@dataclass(frozen=True)
class HookPoint:
    module: Callable[[nn.Module, int], nn.Module | None]  # where, from the architecture table
    read: str  # "input" (the module's first input), "output" (its first output) or "pattern"
    shape: str


_BLOCK = {  # per layer, in the order a forward reaches them
    "resid_pre": HookPoint(arch.layer, "input", "(B, T, d)"),
    "attn.in": HookPoint(lambda m, i: arch.attention(m, i).module, "input", "(B, T, d)"),
    "attn.pattern": HookPoint(lambda m, i: arch.attention(m, i).module, "pattern", "(B, H, T, S)"),
    "attn.z": HookPoint(lambda m, i: arch.attention(m, i).o, "input", "(B, T, H, d_h)"),
    "attn.out": HookPoint(lambda m, i: arch.attention(m, i).module, "output", "(B, T, d)"),
    "mlp.in": HookPoint(lambda m, i: arch.mlp(m, i).in_proj, "input", "(B, T, d)"),
    "mlp.pre": HookPoint(lambda m, i: arch.mlp(m, i).in_proj, "output", "(B, T, d_ff)"),
    "mlp.post": HookPoint(lambda m, i: arch.mlp(m, i).out_proj, "input", "(B, T, d_ff)"),
    "mlp.out": HookPoint(lambda m, i: arch.mlp(m, i).out_proj, "output", "(B, T, d)"),
    "resid_post": HookPoint(arch.layer, "output", "(B, T, d)"),
}
HOOK_POINTS: dict[str, HookPoint] = {
    "embed": HookPoint(lambda m, i: arch.embeddings(m).tokens, "output", "(B, T, d)"),
    **{f"blocks.{{i}}.{k}": p for k, p in _BLOCK.items()},
    "final_norm": HookPoint(lambda m, i: arch.final_norm(m), "output", "(B, T, d)"),
}
_INDEXED = re.compile(r"^blocks\.(\d+)\.(.+)$")


def hook_names(model: nn.Module) -> list[str]:
    """Every hook point of ``model``, in forward order."""
    n = len(arch.layers(model))
    names = ["embed", *(f"blocks.{i}.{k}" for i in range(n) for k in _BLOCK)]
    return names + (["final_norm"] if arch.final_norm(model) is not None else [])


def resolve(model: nn.Module, patterns: Iterable[str]) -> list[str]:
    """The hook names the patterns (names or globs) select, in forward order; UsageError with the
    closest name for a pattern that selects none, or a layer index out of range."""
    names = hook_names(model)
    known = Registry("hook point", hint="names are " + ", ".join(HOOK_POINTS) + " (see attnlab.models.trace)")
    for name in names:
        known.add(name, name)
    chosen: set[str] = set()
    n = len(arch.layers(model))
    for pattern in patterns:
        m = _INDEXED.match(pattern)
        if m and int(m.group(1)) >= n:
            raise UsageError(f"hook point {pattern!r}: layer index {m.group(1)} is out of range (this model has "
                             f"{n} layers: blocks.0 .. blocks.{n - 1})")
        hits = fnmatch.filter(names, pattern)
        if not hits:
            raise UsageError(known.unknown(pattern))
        chosen.update(hits)
    return [name for name in names if name in chosen]


class Trace:
    """Context manager: records the named activations of every forward run inside it."""

    def __init__(self, model: nn.Module, names: str | Iterable[str],
                 on: Callable[[str, torch.Tensor], None] | None = None):
        self.model, self.on = model, on
        self.names = resolve(model, [names] if isinstance(names, str) else list(names))
        self.acts: dict[str, torch.Tensor] = {}
        self._handles: list = []
        self._saved_impl: str | None = None
        self._bt: tuple[int, int] | None = None  # (B, T) of the current forward, for flattened tensors
        self._n_heads = arch.dims(model).n_heads

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.acts:
            raise KeyError(f"{name}: not recorded (traced: {', '.join(self.names)}; did a forward run inside?)")
        return self.acts[name]

    def __enter__(self) -> "Trace":
        try:
            if any(n.endswith(".attn.pattern") for n in self.names):
                self._eager()
            if arch.arch_of(self.model).flat_mlp and any(".mlp." in n for n in self.names):
                self._hook_batch_shape()
            for name in self.names:
                self._hook(name)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._saved_impl is not None:
            self.model.set_attn_implementation(self._saved_impl)
            self._saved_impl = None

    def _eager(self) -> None:
        impl = self.model.config._attn_implementation
        if impl.startswith("attnlab"):  # eager attention would bypass the evicting cache's own attention
            raise UsageError(f"attention patterns switch the model to eager attention, which would bypass the "
                             f"active {impl!r} attention: trace patterns outside the PolicyCache context")
        self._saved_impl = impl
        self.model.set_attn_implementation("eager")

    def _hook_batch_shape(self) -> None:
        def note(module, args, out):
            self._bt = tuple(out.shape[:2])

        self._handles.append(arch.embeddings(self.model).tokens.register_forward_hook(note))

    def _hook(self, name: str) -> None:
        m = _INDEXED.match(name)
        i, template = (int(m.group(1)), f"blocks.{{i}}.{m.group(2)}") if m else (0, name)
        point = HOOK_POINTS[template]
        module = point.module(self.model, i)
        heads = template.endswith("attn.z")

        def record(t: torch.Tensor) -> None:
            t = t.detach() if self.on is not None else t.detach().clone()
            if t.dim() == 2:  # flattened around the MLP (OPT): back to (B, T, width)
                t = t.view(*self._bt, -1)
            t = t.view(*t.shape[:2], self._n_heads, -1) if heads else t
            if self.on is not None:
                self.on(name, t)
            else:
                self.acts[name] = t

        if point.read == "input":
            def hook(mod, args, kwargs):
                record(args[0] if args else kwargs["hidden_states"])

            self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        else:
            pick = 1 if point.read == "pattern" else 0

            def hook(mod, args, out):
                record(out[pick] if isinstance(out, tuple) else out)

            self._handles.append(module.register_forward_hook(hook))
