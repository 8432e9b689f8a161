"""Deja Vu's predictors as rules: the predicted top-k neurons (a SparseMLP rule) and heads (hooks)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.sparsity.heads import head_inputs, heads_zeroed
from attnlab.sparsity.predictor_store import find_beside, load_predictors
from attnlab.sparsity.predictors import SOURCES, Predictors
from attnlab.sparsity.registry import RuleInputs
from attnlab.sparsity.rules import keep_count, topk_mask


# --------------------------------------------------------------------------- the rule
class Predicted:
    """Rule (needs "input"): per token the top-k units by the predictor's logits, k = keep_count(n, keep).

    ``own`` predicts layer i from its input x_i; ``lookahead`` from x_{i-1}, which this rule caches as it
    goes: SparseMLP (PredictedHeads) calls ``mask(x_i, i)`` for each layer in forward order, so the last x
    seen is the previous layer's input of the same tokens. A layer the lookahead set does not cover
    (layer 0) uses ``own``. Run a lookahead layer's predecessor under the same SparseMLP."""

    name, needs = "predicted", "input"

    def __init__(self, keep: float, own: Predictors | None = None, lookahead: Predictors | None = None,
                 folders: tuple[Path, ...] = ()):
        if own is None and lookahead is None:
            raise UsageError("a Predicted rule needs own-input or lookahead predictors (or both)")
        keep_count(1, keep)
        self.keep, self.own, self.lookahead = keep, own, lookahead
        self.folders = tuple(folders)  # where they were read from (saved_rule), for the run's record
        self._last: tuple[int, torch.Tensor] | None = None  # (layer, its x), for the next layer's lookahead

    def _which(self, layer: int) -> Predictors | None:
        for p in (self.lookahead, self.own):
            if p is not None and layer in p.slot:
                return p
        return None

    def check(self, layer: int, width: int) -> None:
        p = self._which(layer)
        if p is None:
            raise UsageError(f"no predictor for layer {layer}: train predictors on this model's layers")
        if p.meta.width != width:
            raise UsageError(f"predictor for layer {layer} scores {p.meta.width} {p.meta.unit}, the layer has {width}")

    def step_bytes(self, layers) -> int:
        """The bytes of predictor weights one decode step reads over ``layers``: each layer's own predictor (a
        lookahead set's where it covers the layer, else the own-input set's), as a bandwidth ledger counts them."""
        total = 0
        for i in layers:
            p = self._which(i)
            if p is not None:
                total += sum(t[p.slot[i]].nbytes for t in (p.w1, p.w2, p.b2))
        return total

    def report(self, gated: bool = True) -> dict:
        """What a run records of the predictors: their source, the folders read, rank r and cost."""
        used = self.lookahead or self.own
        return {"source": SOURCES[1] if self.lookahead is not None else SOURCES[0],
                "folders": [str(f) for f in self.folders], "r": used.meta.r, **used.cost(gated)}

    def _logits(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        """x_i (..., d) -> the predictor's logits (..., n): from x_i (own) or the x_{i-1} seen last (lookahead)."""
        p, x = self._which(layer), values
        if p is self.lookahead:
            prev = self._last
            if prev is None or prev[0] != layer - 1 or prev[1].shape != values.shape:
                raise UsageError(f"the lookahead predictor of layer {layer} needs layer {layer - 1}'s input of the "
                                 "same tokens: run both layers under this SparseMLP")
            x = prev[1]
        self._last = (layer, values)
        return p.logits(x, layer)

    def mask(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        """x_i (..., d) -> bool (..., n)."""
        return topk_mask(self._logits(values, layer), self.keep)

    def indices(self, values: torch.Tensor, layer: int) -> torch.Tensor:
        """x_i (1, d), one token -> (k,) long: its kept units straight from topk, in no particular order (the
        gather path's chooser: no mask to build and read back)."""
        logits = self._logits(values, layer)  # (1, n)
        return logits.topk(keep_count(logits.shape[-1], self.keep)).indices.view(-1)


class PredictedHeads:
    """Context manager: per token keep the attention heads a :class:`Predicted` rule over heads predictors
    picks from the attention input x_i (own) or x_{i-1} (lookahead), zeroing the rest before the output
    projection as SparseHeads does; every layer, forward pre-hooks removed on exit."""

    def __init__(self, model: nn.Module, rule: Predicted, record=None):
        dm = arch.dims(model)
        self.model, self.rule, self.record, self.n_heads = model, rule, record, dm.n_heads
        for i in range(dm.n_layers):
            rule.check(i, dm.n_heads)
        self._masks: dict[int, torch.Tensor] = {}
        self._handles: list = []

    def __enter__(self) -> "PredictedHeads":
        for i in range(arch.dims(self.model).n_layers):
            att = arch.attention(self.model, i)
            self._handles += [att.module.register_forward_pre_hook(self._decide(i), with_kwargs=True),
                              att.o.register_forward_pre_hook(self._apply(i), with_kwargs=True)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles, self._masks = [], {}

    def _decide(self, layer: int):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]  # (B, T, d)
            self._masks[layer] = self.rule.mask(x, layer)  # (B, T, H)

        return hook

    def _apply(self, layer: int):
        def hook(module, args, kwargs):
            z, zh = head_inputs(args, kwargs, self.n_heads)
            mask = self._masks.pop(layer).reshape(zh.shape[:-1])  # (..., H)
            if self.record is not None:
                self.record.add("heads", layer, mask, zh.float().norm(dim=-1))
            return heads_zeroed(args, kwargs, z, zh, mask)

        return hook


def saved_rule(model: nn.Module, name: str, keep: float, source: str = "lookahead", folder: str = "",
               r: int | None = None) -> tuple[Predicted, list[Path]]:
    """A :class:`Predicted` neuron rule from saved predictors, and the folders read: ``folder`` a run's
    predictors folder (own/, lookahead/), or "" for those beside model ``name`` at ``keep`` (rank ``r``;
    None: the one saved). The lookahead source also loads own: layer 0 has no previous layer to read."""
    if source not in SOURCES:
        raise UsageError(f"predictor source {source!r}: choose {' or '.join(SOURCES)}")
    needed = SOURCES[:1] if source == "own" else SOURCES
    folders = [Path(folder) / s if folder else find_beside(name, "neurons", s, keep, r) for s in needed]
    preds = [load_predictors(f, model) for f in folders]  # refuses another model's or layer count's
    for s, f, p in zip(needed, folders, preds):
        if (p.meta.unit, p.meta.source) != ("neurons", s):
            raise UsageError(f"{f} holds {p.meta.source} {p.meta.unit} predictors, not {s} neurons ones: give "
                             "the predictors folder of `attnlab reproduce dejavu` (with own/ and lookahead/)")
        if p.meta.keep != keep:
            raise UsageError(f"predictors in {f} were trained for keep {p.meta.keep:g}, not {keep:g}: give keep "
                             f"{p.meta.keep:g} or train predictors for keep {keep:g}")
    return Predicted(keep, *preds, folders=folders), folders


def saved_rules(rule_cls: type, model: nn.Module, inputs: RuleInputs) -> Callable[[float], Predicted]:
    """The registry's builder of ``predicted``: keep -> the neuron rule read (then, not now) from the saved
    predictors ``inputs`` name for that keep (see :func:`saved_rule`)."""
    return lambda keep: saved_rule(model, inputs.model, keep, inputs.source, inputs.predictors, inputs.rank)[0]
