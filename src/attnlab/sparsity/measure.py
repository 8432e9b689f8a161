"""Measuring contextual sparsity: perplexity (dense, and under a rule with the per-layer profile of what
it kept), calibration of the thresholding rules, static sets, and the builders the rule registry names
(how alike neighbouring layers and tokens are: ``similarity.py``).

Every measurement is a function of a model; a method is wrapped around it by the caller
(``with SparseMLP(model, rule): perplexity(model, ids)``, or :func:`sparse_perplexity`). Texts are
processed in windows of ``window`` tokens, each window its own forward from position 0, and every
statistic is accumulated as it goes (sums, counts, fixed-bin histograms), so memory does not grow with
the text.
"""
from __future__ import annotations

import math
from contextlib import ExitStack
from typing import Callable, Iterator, NamedTuple

import torch

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import follow
from attnlab.data.corpus import split_tail
from attnlab.data.sources import HUB_PREFIX, locate, read_corpus
from attnlab.evals.inputs import load_model, text_ids
from attnlab.evals.longppl import scored_nll
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.heads import SparseHeads
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.record import SparsityRecord
from attnlab.sparsity.registry import RULES, RuleInputs
from attnlab.sparsity.rules import Rule, topk_mask


def load_texts(name: str, text: str, tokens: int, calibration: tuple[str, ...] = (), calibration_tokens: int = 0,
               device: str = "cpu", fix: str | None = None, calibration_fix: str | None = None):
    """(model, ids (tokens,) of the evaluation text, calibration ids (calibration_tokens,) or None): the
    calibration is the first tokens of each calibration text in turn (an even share of each), and may not
    be the evaluation text itself. ``fix``, ``calibration_fix``: how the user names the texts (``--text PATH``)."""
    def where(spec, key, how):
        return spec if spec.startswith(HUB_PREFIX) else locate(spec, key, how).resolve()

    for spec in calibration:
        if where(spec, "calibration", calibration_fix) == where(text, "text", fix):
            raise ConfigError(f"calibration text {spec} is the evaluation text: calibrate on another one, "
                              "e.g. wikitext-2/valid.txt (never the evaluation split)")
    model, tok = load_model(name, device)
    ids = text_ids(tok, text, tokens, fix)
    if not calibration:
        return model, ids, None
    parts = []
    for j, spec in enumerate(calibration):  # an even share of each text; the first takes the remainder
        n = calibration_tokens // len(calibration) + (calibration_tokens % len(calibration) if j == 0 else 0)
        try:
            parts.append(text_ids(tok, spec, n, calibration_fix))
        except ConfigError as e:
            raise ConfigError(f"calibration {e}") from None
    return model, ids, torch.cat(parts)


def held_out(texts: tuple[str, ...], key: str, holdout: float, vocab_size: int, tokens: int):
    """(tokenizer, training ids, evaluation ids (tokens,)) for a model trained here: the first lines of each
    text train a byte-level BPE and the model, its last ``holdout`` share of lines (contiguous, as ``attnlab
    train --holdout``) evaluates it. ``key``: how the config names the texts (in the one-line errors)."""
    from attnlab.models.tokenizer import make_tokenizer

    head, tail = [], []
    for spec in texts:
        first, last = split_tail(read_corpus(spec, key), holdout)
        head, tail = head + first, tail + last
    tok = make_tokenizer("bpe", head, vocab_size)
    train_ids, eval_ids = tok.encode_lines(head), tok.encode_lines(tail)
    if eval_ids.numel() < tokens:
        raise ConfigError(f"{key}={','.join(texts)}: its held-out tail ({holdout:g} of the lines) has only "
                          f"{eval_ids.numel()} tokens; need tokens={tokens} (lower tokens or raise holdout)")
    return tok, train_ids, eval_ids[:tokens]


def spans(n_tokens: int, window: int, stride: int | None = None) -> Iterator[tuple[int, int, int]]:
    """(start, first scored, end) of each window over ``n_tokens``: windows of ``window`` tokens whose
    ends step by ``stride`` (default ``window``: non-overlapping); each scores the tokens after the
    previous window's end, from its own second token on (the first has no context in its window)."""
    stride = stride or window
    if not 0 < stride <= window:
        raise ValueError(f"stride {stride} must lie in (0, window={window}]")
    nominal, prev = window, 0  # a window's end before clipping to the text: its start is nominal - window
    while prev < n_tokens:
        start, end = max(0, nominal - window), min(nominal, n_tokens)
        yield start, max(prev, start + 1), end
        prev, nominal = end, nominal + stride


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, window: int = 512, stride: int | None = None, progress=None) -> float:
    """exp(mean NLL) of ``ids`` (T,) over windows (see :func:`spans`), every scored token counted once."""
    total, count = 0.0, 0
    for start, first, end in spans(ids.numel(), window, stride):
        if end - first < 1:
            continue
        nll = scored_nll(model, ids[start:end], torch.arange(first - start, end - start))  # (end - first,)
        total, count = total + float(nll.sum()), count + nll.numel()
        if progress is not None:
            progress.update(end - first)
    if not count:
        raise ValueError(f"perplexity needs at least 2 tokens in a window; got {ids.numel()} tokens")
    return math.exp(total / count)


def sparse_perplexity(model, ids: torch.Tensor, rule: Rule, window: int = 512, heads_keep: float | None = None,
                      progress=None) -> tuple[float, dict]:
    """Perplexity (as :func:`perplexity`) with ``rule`` choosing every MLP's neurons per token (and, given
    ``heads_keep``, only that share of each token's attention heads kept), and the per-layer profile of
    what the rule kept (:func:`layer_profile`)."""
    record = SparsityRecord()
    with ExitStack() as stack:
        stack.enter_context(SparseMLP(model, rule, record=record))
        if heads_keep is not None:
            stack.enter_context(SparseHeads(model, heads_keep))
        ppl = perplexity(model, ids, window, progress=progress)
    return ppl, layer_profile(record)


@torch.no_grad()
def traced_windows(model, ids: torch.Tensor, names: list[str], window: int, progress=None) -> Iterator[Trace]:
    """One forward per non-overlapping window with ``names`` traced; yields the trace after each."""
    device = next(model.parameters()).device
    with Trace(model, names) as tr:
        for start, _, end in spans(ids.numel(), window):
            model(ids[None, start:end].to(device), use_cache=False)
            yield tr
            if progress is not None:
                progress.update(end - start)


def gate_values(model, i: int, x: torch.Tensor) -> torch.Tensor:
    """What CATS thresholds, act(gate(x)) (..., d_ff), from the MLP input x (..., d); for a plain MLP,
    act(in(x)), which is h itself."""
    m = arch.mlp(model, i)
    return m.act_fn((m.gate_proj or m.in_proj)(x))


# --------------------------------------------------------------------------- calibration (CATS, TEAL)
class MagnitudeHistogram:
    """Counts of log10 |v| per layer in fixed bins: the |v| quantiles of a whole text in constant memory.
    Bins are 0.25% wide in |v| (1e-10 .. 1e5); a threshold is interpolated inside its bin."""

    LO, HI, BINS = -10.0, 5.0, 6000

    def __init__(self, n_layers: int):
        self.counts = torch.zeros(n_layers, self.BINS, dtype=torch.float64)

    def add(self, layer: int, values: torch.Tensor) -> None:
        logs = values.detach().abs().float().clamp_min(1e-30).log10().clamp(self.LO, self.HI)
        self.counts, = follow(logs, self.counts)
        self.counts[layer] += torch.histc(logs, self.BINS, self.LO, self.HI).double()

    def threshold(self, layer: int, keep: float) -> float:
        """t such that a fraction ``keep`` of the entries seen has |v| >= t (0.0 keeps everything)."""
        counts = self.counts[layer].cpu()
        above = counts.flip(0).cumsum(0).flip(0)  # (BINS,) entries in this bin or higher
        target = keep * float(counts.sum())
        b = int((above >= target).nonzero().max())  # the highest bin whose tail reaches the target
        if b == 0:
            return 0.0  # the crossing lies among the (near-)zero entries: keep every entry
        inside = float(above[b] - target) / max(float(counts[b]), 1.0)  # share of bin b to drop, from below
        width = (self.HI - self.LO) / self.BINS
        return 10 ** (self.LO + (b + inside) * width)


class Calibration(NamedTuple):
    """A thresholding rule's histograms on a calibration text; thresholds (and rules) at any keep from one pass."""

    kind: str  # the rule's registered name ("cats", "teal")
    hists: dict[str, MagnitudeHistogram]  # one per quantity the rule thresholds ("gate"; "x" and "h")

    def thresholds(self, keep: float) -> dict[int, float] | tuple[dict[int, float], ...]:
        """{layer: t} of the one quantity thresholded (CATS), or a tuple of them in ``thresholded``
        order (TEAL: {layer: t_x}, {layer: t_h})."""
        per = self._per_quantity(keep)
        return next(iter(per.values())) if len(per) == 1 else tuple(per.values())

    def _per_quantity(self, keep: float) -> dict[str, dict[int, float]]:
        return {k: {i: h.threshold(i, keep) for i in range(h.counts.shape[0])} for k, h in self.hists.items()}

    def rule(self, keep: float):
        return RULES.get(self.kind).rule_class().calibrated(self._per_quantity(keep), keep)


def _quantity(model, i: int, what: str, tr) -> torch.Tensor:
    """What a threshold applies to at layer i, from a trace of the MLP's input and h: |act(gate(x))|
    ("gate", CATS), x entering the MLP ("x", TEAL) or h entering the output projection ("h", TEAL)."""
    x = tr[f"blocks.{i}.mlp.in"]  # (1, W, d)
    if what == "gate":
        return gate_values(model, i, x)  # (1, W, d_ff)
    return x if what == "x" else tr[f"blocks.{i}.mlp.post"]  # (1, W, d) | (1, W, d_ff)


def calibration(model, ids: torch.Tensor, kind: str, window: int = 512, progress=None) -> Calibration:
    """Histograms per layer of each quantity the thresholding rule ``kind`` thresholds (its class's
    ``thresholded``: CATS |act(gate(x))|, TEAL |x| entering the MLP and |h| entering its output
    projection), over ``ids`` (T,): a calibration text, never the evaluation one."""
    keys = getattr(RULES.get(kind).rule_class(), "thresholded", ())
    if not keys:
        raise ValueError(f"rule {kind!r} has no thresholds to calibrate")
    n = arch.dims(model).n_layers
    hists = {k: MagnitudeHistogram(n) for k in keys}
    names = ["blocks.*.mlp.in"] + (["blocks.*.mlp.post"] if "h" in keys else [])
    for tr in traced_windows(model, ids, names, window, progress):
        for i in range(n):
            for k in keys:
                hists[k].add(i, _quantity(model, i, k, tr))
    return Calibration(kind, hists)


def calibrate(model, ids: torch.Tensor, keep: float, kind: str, window: int = 512):
    """CATS ({layer: t}) or TEAL (({layer: t_x}, {layer: t_h})) thresholds keeping ``keep`` on ``ids``."""
    return calibration(model, ids, kind, window).thresholds(keep)


# --------------------------------------------------------------------------- static sets
@torch.no_grad()
def mean_abs_h(model, ids: torch.Tensor, window: int = 512, progress=None) -> dict[int, torch.Tensor]:
    """{layer: (d_ff,) mean |h| of each neuron over ``ids``}: how active each neuron is on average."""
    n = arch.dims(model).n_layers
    sums, count = {}, 0
    for tr in traced_windows(model, ids, ["blocks.*.mlp.post"], window, progress):
        for i in range(n):
            h = tr[f"blocks.{i}.mlp.post"][0].abs().double()  # (W, d_ff)
            sums[i] = sums.get(i, 0) + h.sum(0)
        count += h.shape[0]
    return {i: (s / count).float() for i, s in sums.items()}


def top_sets(means: dict[int, torch.Tensor], keep: float) -> dict[int, torch.Tensor]:
    """{layer: sorted indices of the ``keep`` share of neurons with the largest mean |h|}."""
    return {i: topk_mask(m, keep).nonzero()[:, 0] for i, m in means.items()}


def static_sets(model, ids: torch.Tensor, keep: float, window: int = 512) -> dict[int, torch.Tensor]:
    """The static rule's sets: per layer the most active neurons on average (mean |h| over ``ids``)."""
    return top_sets(mean_abs_h(model, ids, window), keep)


# --------------------------------------------------------------------------- builders (attnlab.sparsity.registry)
def uncalibrated(rule_cls: type, model, inputs: RuleInputs) -> Callable[[float], Rule]:
    """A rule that reads nothing before it decides (the oracle): keep -> ``rule_cls(keep)``."""
    return rule_cls


def thresholded(rule_cls: type, model, inputs: RuleInputs) -> Callable[[float], Rule]:
    """A thresholding rule (CATS, TEAL) calibrated by one pass over ``inputs.calibration``."""
    return calibration(model, inputs.calibration, rule_cls.name, inputs.window, inputs.progress).rule


def most_active(rule_cls: type, model, inputs: RuleInputs) -> Callable[[float], Rule]:
    """The static rule: per layer the neurons with the largest mean |h| over ``inputs.calibration``."""
    means = mean_abs_h(model, inputs.calibration, inputs.window, inputs.progress)
    return lambda keep: rule_cls(top_sets(means, keep), keep)


def rule_builder(model, name: str, calib: torch.Tensor | None, window: int = 512,
                 progress=None) -> Callable[[float], Rule]:
    """keep -> the registered rule ``name`` at that keep, calibrated (where it is) on ``calib``."""
    return RULES.get(name).build(model, RuleInputs(calib, window, progress))


# --------------------------------------------------------------------------- what a sparse run kept
def layer_profile(record) -> dict[str, list[float] | float]:
    """The per-layer sparsity profile a :class:`~attnlab.sparsity.mlp.SparsityRecord` holds after a run:
    ``kept`` (L,) the share of neurons of h kept, ``mass`` (L,) the share of |h| they carry, and both
    over all layers, ``zero`` (L,) the share of entries of h exactly zero before the rule's mask (natural
    sparsity: most of a ReLU-gated MLP's, none of a SiLU one's) and over all layers; for TEAL also
    ``x_kept`` (L,), the share of input channels of x kept."""
    layers = record.layers("h")
    out = {"kept": [record.kept_fraction(i) for i in layers], "mass": [record.mass(i) for i in layers],
           "zero": [record.zero_share(i) for i in layers], "overall_kept": record.kept_fraction(),
           "overall_mass": record.mass(), "overall_zero": record.zero_share()}
    if record.layers("x"):
        out["x_kept"] = [record.kept_fraction(i, "x") for i in record.layers("x")]
        out["overall_x_kept"] = record.kept_fraction(None, "x")
    return out
