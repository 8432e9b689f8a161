"""``dejavu``: Deja Vu's neuron predictors on a real model: recall of the oracle set, |h| mass, PPL, cost.

Per layer a low-rank predictor (attnlab.sparsity.predictors: d -> r, ReLU, r -> d_ff) is trained on local
text (never the evaluation split) to predict the oracle's top-k neurons of h from the layer's own MLP
input x_i ("own") and, as Deja Vu's lookahead, from the previous layer's MLP input x_{i-1} ("lookahead").
On the evaluation text: per layer the recall of the oracle set by a predicted set of the same size
(chance = keep), the share of |h| mass it captures, and the size and recall of Deja Vu's thresholded set
(sigmoid > 0.5); then perplexity with the predicted sets vs the oracle's vs dense, every position of every
window sparsified (as contextual-sparsity); and greedy decode at batch 1 timed, dense vs SparseMLP gather
with the lookahead predictor choosing each step's neurons, its multiply-adds inside the step (Deja Vu's
speed claim, checked: faster than dense; quick mode times a few steps). The predictors are saved in the
run folder (``predictors/own``, ``predictors/lookahead``) and beside the model's weights
(``M/predictors/neurons-own-r128-keep0.5`` and so on, for the model folder M; a one-line warning where M
is not writable); ``predictors=FOLDER`` reloads a run folder's, ``predictors=beside`` those beside the
model at this rank and keep, instead of training (``attnlab sparsity --rule predicted`` uses them too).
A rank whose training this machine's memory cannot hold is refused before anything is allocated
(``predictors.check_fits``). ``heads_keep=K`` adds head predictors (Deja Vu's attention predictor: top
heads by output norm from the attention input), reported as findings: no claims were fixed for them.

Time with SmolLM2-135M on one shared CPU core: quick 45 s; full (49,152 training tokens, 2 epochs, 4,096
evaluation tokens) 18 minutes, of which training ~14.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import finding
from attnlab.experiments.registry import Result, register
from attnlab.methods.configured import WEIGHTS_AND_ROPE, configured, enter_configured, methods_option
from attnlab.models import arch
from attnlab.sparsity.configs import UNDER_WHY
from attnlab.sparsity.dejavu_claims import dejavu_claims, middle
from attnlab.sparsity.heads import SparseHeads
from attnlab.sparsity.measure import load_texts, perplexity, sparse_perplexity
from attnlab.sparsity.plots import dejavu_figure
from attnlab.sparsity.predicted import Predicted, PredictedHeads
from attnlab.sparsity.predictor_store import BESIDE, find_beside, load_predictors, save_beside, save_predictors
from attnlab.sparsity.predictors import SOURCES, check_fits, new_predictors, score, train
from attnlab.sparsity.rules import Oracle, keep_count
from attnlab.sparsity.speed import decode_speed

TALK_ORDER = 1  # after contextual-sparsity


@dataclass(frozen=True)
class DejaVuConfig:
    model: str = "smollm2"
    text: str = "wikitext-2/test.txt"  # evaluation: recall, mass, PPL
    train_texts: tuple[str, ...] = ("wikitext-2/valid.txt", "kjv", "war-and-peace")  # never the evaluation split
    tokens: int = 4096
    train_tokens: int = 49152  # split evenly between the training texts
    window: int = 512
    rank: int = 128  # r: the predictor's hidden width
    keep: float = 0.5
    epochs: int = 2
    batch: int = 128
    lr: float = 3e-3
    # reload instead of training: "beside" (those saved beside the model's weights at this rank and keep,
    # M/predictors/<unit>-<source>-r<rank>-keep<keep>) or a run's folder (with own/ and lookahead/)
    predictors: str = ""
    # also save them beside the model's weights; quick runs do not: a demo's predictors, trained on a few
    # thousand tokens, would replace the real ones there
    beside: bool = True
    heads_keep: float = 0.0  # > 0: also head predictors (heads-own/, heads-lookahead/) at this share of heads
    speed_steps: int = 32  # timed greedy decode steps, batch 1, dense vs the lookahead predictor choosing
    judge: bool = True  # False (quick): a predictor trained on a few thousand tokens is not the claims' setting: they
    # are unresolved, and the quick checks what any scale decides (the predictor beats chance)
    # claim thresholds, fixed before the first run on SmolLM2
    recall: float = 0.8  # lookahead recall at the oracle's set size in most middle layers ...
    recall_share: float = 0.5  # ... share of the middle layers (L/4 .. 3L/4)
    lookahead_gap: float = 0.05  # mean recall lost by lookahead vs own input in the middle layers, at most
    ppl_vs_oracle: float = 0.05  # predicted-set PPL within 5% of the oracle's at the same keep
    edge_drop: float = 0.05  # lookahead recall at layer 1 and the last layer below the middle median by this
    speedup: float = 1.0  # decode with the predictor choosing (its cost inside each step) faster than dense

    methods: tuple[str, ...] = methods_option()  # weights and RoPE methods the rules are measured under

    METHOD_KINDS: ClassVar = WEIGHTS_AND_ROPE
    METHOD_WHY: ClassVar = UNDER_WHY

    def __post_init__(self):
        configured(self)  # an unknown method or option, or a KV method: one line, before the model loads
        keep_count(1, self.keep)
        if self.heads_keep:
            keep_count(1, self.heads_keep)
        if self.keep == 1.0:
            raise ConfigError("keep=1.0 keeps every neuron: there is nothing to predict; use e.g. keep=0.5")
        if min(self.window, self.tokens, self.rank, self.epochs, self.batch, self.speed_steps) < 1 or self.window < 2:
            raise ConfigError(f"window={self.window}, tokens={self.tokens}, rank={self.rank}, epochs={self.epochs}, "
                              f"batch={self.batch}, speed_steps={self.speed_steps}: need window >= 2 and the others "
                              ">= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr={self.lr}: give a positive learning rate, e.g. lr=3e-3")
        if not self.predictors and self.train_tokens < 2 * len(self.train_texts):
            raise ConfigError(f"train_tokens={self.train_tokens}: need at least 2 per training text")


def _load(cfg, model, unit: str, keep: float) -> list:
    """The saved (own, lookahead) predictors of ``unit`` that ``cfg.predictors`` names, trained for ``keep``."""
    key = "keep" if unit == "neurons" else "heads_keep"
    if cfg.predictors == BESIDE:
        folders = [find_beside(cfg.model, unit, s, keep, cfg.rank) for s in SOURCES]
    else:
        folders = [Path(cfg.predictors) / f"{'' if unit == 'neurons' else 'heads-'}{s}" for s in SOURCES]
    preds = [load_predictors(f, model) for f in folders]  # refuses another model's (fingerprint, layer count)
    if preds[0].meta.keep != keep:
        raise ConfigError(f"{unit} predictors in {folders[0].parent} were trained for keep={preds[0].meta.keep}, "
                          f"not {key}={keep}: set {key}={preds[0].meta.keep} or train new ones")
    return preds


def _save(cfg, ctx, preds: list) -> None:
    """Into the run folder, and (``cfg.beside``) beside the model's weights where writable."""
    for p in preds:
        name = f"{'' if p.meta.unit == 'neurons' else 'heads-'}{p.meta.source}"
        save_predictors(p, Path(ctx.out) / "predictors" / name)
        if cfg.beside and not cfg.methods:  # trained under other weights: not the model's own predictors
            save_beside(p, cfg.model)


def _predictors(cfg, model, ids, ctx) -> tuple[list, list[float] | None, str]:
    """(own, lookahead) predictors, the last epoch's BCE (None when reloaded), and where they are saved."""
    if cfg.predictors:
        return _load(cfg, model, "neurons", cfg.keep), None, cfg.predictors
    preds = [new_predictors(model, cfg.model, cfg.rank, cfg.keep, s) for s in SOURCES]
    with ctx.progress(ids.numel() * cfg.epochs, "train predictors") as bar:
        loss = train(preds, model, ids, cfg.epochs, cfg.window, cfg.batch, cfg.lr, bar)
    _save(cfg, ctx, preds)
    return preds, loss, "predictors/"


def _ppl(model, ids, cfg, ctx, preds) -> dict[str, float]:
    own, look = preds
    runs = {"dense": None, "oracle": Oracle(cfg.keep), "own": Predicted(cfg.keep, own=own),
            "lookahead": Predicted(cfg.keep, own=own, lookahead=look)}  # lookahead: layer 0 from its own input
    out = {}
    for name, rule in runs.items():
        with ctx.progress(ids.numel(), f"PPL {name}") as bar:
            if rule is None:
                out[name] = perplexity(model, ids, cfg.window, progress=bar)
            else:
                out[name] = sparse_perplexity(model, ids, rule, cfg.window, progress=bar)[0]
    return out


def _heads(cfg, model, ids, train_ids, ctx, dense: float) -> tuple[dict, list]:
    """Head predictors (Deja Vu's attention predictor) at ``heads_keep``: recall per layer and PPL with the
    predicted heads vs the top heads by output norm (SparseHeads) vs dense; findings (no claims fixed)."""
    if cfg.predictors:
        preds = _load(cfg, model, "heads", cfg.heads_keep)
    else:
        preds = [new_predictors(model, cfg.model, cfg.rank, cfg.heads_keep, s, unit="heads") for s in SOURCES]
        with ctx.progress(train_ids.numel() * cfg.epochs, "train head predictors") as bar:
            train(preds, model, train_ids, cfg.epochs, cfg.window, cfg.batch, cfg.lr, bar)
        _save(cfg, ctx, preds)
    keep, n_heads = preds[0].meta.keep, preds[0].meta.n_heads
    with ctx.progress(ids.numel(), "score heads") as bar:
        s = score(preds, model, ids, cfg.window, bar)
    runs = {"oracle": lambda: SparseHeads(model, keep), "own": lambda: PredictedHeads(model, Predicted(keep, preds[0])),
            "lookahead": lambda: PredictedHeads(model, Predicted(keep, *preds))}
    ppl = {"dense": dense}
    for name, make in runs.items():
        with make(), ctx.progress(ids.numel(), f"PPL heads {name}") as bar:
            ppl[name] = perplexity(model, ids, cfg.window, progress=bar)
    mean = {src: statistics.mean(s[src]["recall"]) for src in SOURCES}
    found = [finding(f"head predictors (top {keep_count(n_heads, keep)} of {n_heads} heads by output norm, from the "
                     f"attention input): mean recall own {mean['own']:.3f}, lookahead {mean['lookahead']:.3f} (chance "
                     f"{keep_count(n_heads, keep) / n_heads:.3f}); PPL top heads {ppl['oracle']:.3f}, own "
                     f"{ppl['own']:.3f}, dense {dense:.3f}; lookahead PPL / top-heads PPL - 1",
                     ppl["lookahead"] / ppl["oracle"] - 1)]
    return {"heads_ppl": ppl, "heads_scores": s, "heads_cost": preds[0].cost()}, found


def _speed(cfg, model, ids, ctx, preds) -> dict:
    """Greedy decode at batch 1 after the text's first ``window`` tokens, dense vs SparseMLP gather with the
    lookahead predictor choosing each step's neurons (its multiply-adds inside the timed step)."""
    with ctx.progress(2, "decode speed") as bar:
        decode = decode_speed(model, ids[:cfg.window], Predicted(cfg.keep, *preds), cfg.speed_steps)
        bar.update(2)
    return decode


@register("dejavu", "Deja Vu: low-rank predictors of each token's top MLP neurons (own input vs lookahead): "
          "recall, |h| mass, PPL vs oracle, cost", DejaVuConfig,
          quick={"tokens": 512, "train_tokens": 1536, "window": 256, "epochs": 1, "batch": 32, "rank": 64,
                 "judge": False, "beside": False, "speed_steps": 4})
def run_dejavu(cfg: DejaVuConfig, ctx) -> Result:
    model, ids, train_ids = load_texts(cfg.model, cfg.text, cfg.tokens, () if cfg.predictors else cfg.train_texts,
                                       cfg.train_tokens, ctx.device)
    enter_configured(cfg, model, None, ctx)  # predictors trained on, and scored on, the model the methods leave
    n = arch.dims(model).n_layers
    if n < 3:
        raise ConfigError(f"{cfg.model} has {n} layers: the lookahead comparison needs at least 3")
    if not cfg.predictors:  # a rank this machine cannot hold: refused before anything is allocated
        check_fits(model, cfg.rank, ("neurons", "heads") if cfg.heads_keep else ("neurons",), cfg.batch, cfg.window)
    preds, loss, where = _predictors(cfg, model, train_ids, ctx)
    with ctx.progress(ids.numel(), "score") as bar:
        s = score(preds, model, ids, cfg.window, bar)
    ppl = _ppl(model, ids, cfg, ctx, preds)
    decode = _speed(cfg, model, ids, ctx, preds)
    cost = preds[0].cost(arch.mlp(model, 0).gate_proj is not None)
    dejavu_figure(ctx, s, ppl, cfg.keep)
    metrics = {"ppl": ppl, "scores": s, "cost": cost, "train_bce": loss, "predictors": where, "middle_layers":
               list(middle(n)), "decode": decode}
    claims = dejavu_claims(cfg, s, ppl, cost, n, decode)
    if cfg.heads_keep:
        more, found = _heads(cfg, model, ids, train_ids, ctx, ppl["dense"])
        metrics.update(more)
        claims += found
    source = "beside the model" if cfg.predictors == BESIDE else cfg.predictors
    made = (f"reloaded from {source}" if cfg.predictors else f"trained on {cfg.train_tokens} tokens of "
            f"{', '.join(cfg.train_texts)} for {cfg.epochs} epoch(s)")
    summary = (f"{cfg.model}: predictors (r={preds[0].meta.r}) {made}; scored on {cfg.tokens} tokens of "
               f"{cfg.text} at keep {cfg.keep:g}. Mean recall at the oracle's set size: own "
               f"{statistics.mean(s['own']['recall']):.3f}, lookahead {statistics.mean(s['lookahead']['recall']):.3f}"
               f" (chance {cfg.keep:g}). PPL: " + ", ".join(f"{k} {v:.3f}" for k, v in ppl.items()) + ".")
    figures = {"dejavu.png": "Left: per layer, recall of the oracle's top-k set by the predicted set of the same size "
               "(solid) and the share of |h| mass it captures (dotted), own input vs lookahead; the oracle's mass "
               "dashed. Right: perplexity dense, with the oracle's sets and with the predicted sets."}
    return Result(claims, metrics, figures, summary)
