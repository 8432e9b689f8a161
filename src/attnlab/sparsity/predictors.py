"""Deja Vu's predictors: per layer a low-rank MLP from x to the top-k neurons (or heads); built, trained, scored.

Shape: Linear(d -> r, no bias), ReLU, Linear(r -> d_ff): d_ff logits saying which neurons of
h = act(gate(x)) * up(x) are in the oracle's top-k set by |h|. Deja Vu's code has no activation (a rank-r
linear map), which suits ReLU models (a neuron is active where its pre-activation, linear in x, is > 0);
a SwiGLU neuron is large where |gate(x)| and |up(x)| are, of either sign, which no linear map of x
ranks, so the ReLU is there (relu(a.x) + relu(-a.x) = |a.x|). Trained with multi-label BCE against the
oracle mask (Deja Vu weights its BCE towards the rare positives; at keep 0.5 the labels are balanced, so
plain BCE), AdamW with weight decay 0.01 (Deja Vu: lr 1e-3, batch 1024, 20 epochs on ~400k tokens).

Two sources of the input, per layer i:

    "own"        x_i, the MLP input of layer i (``blocks.{i}.mlp.in``, after its norm)
    "lookahead"  x_{i-1}, the MLP input of layer i-1 (Deja Vu's lookahead: known one layer earlier, so
                 the prediction can run asynchronously); layers 1..L-1 only

Heads likewise (unit "heads", Deja Vu's attention predictor): from the attention input (``attn.in``) to
the top-k heads by output norm ‖z_h‖ (``attn.z``), run by :class:`PredictedHeads`. The L predictors of a
source are trained together as stacked tensors (one bmm per step). Saved and loaded by
:mod:`attnlab.sparsity.predictor_store`; run as rules by :mod:`attnlab.sparsity.predicted`.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.errors import ConfigError, UsageError
from attnlab.core.metrics import follow
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.sparsity.rules import keep_count, topk_mask

SOURCES = ("own", "lookahead")
# what a predictor reads (x) and ranks (|h| per neuron, or a head's output norm ‖z_h‖), per layer i
UNITS = {"neurons": ("mlp.in", "mlp.post"), "heads": ("attn.in", "attn.z")}


def model_fingerprint(model: nn.Module) -> str:
    """A short hash of the model's config and a few weight sums: which model predictors were trained for."""
    cfg = model.config.to_dict()
    keep = {k: cfg.get(k) for k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "vocab_size", "hidden_act")}
    m0 = arch.mlp(model, 0)
    sums = [float(arch.weight(p).detach().double().sum()) for p in (m0.in_proj, m0.out_proj)]
    return hashlib.sha256(json.dumps([keep, [round(s, 4) for s in sums]]).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Meta:
    model: str  # the name the model was loaded by (a label)
    fingerprint: str  # model_fingerprint: what loading checks
    n_layers: int
    d: int
    d_ff: int
    r: int
    keep: float
    source: str
    layers: tuple[int, ...]  # the layers predicted (lookahead: 1..L-1)
    unit: str = "neurons"  # or "heads": the top heads by output norm, from the attention input
    n_heads: int = 0  # H, for unit "heads"

    @property
    def width(self) -> int:  # the units each predictor scores: d_ff neurons or H heads
        return self.d_ff if self.unit == "neurons" else self.n_heads


class Predictors(nn.Module):
    """The predictors of one source: W1 (P, d, r), W2 (P, r, n), b2 (P, n) for P predicted layers, n = width."""

    def __init__(self, meta: Meta):
        super().__init__()
        self.meta = meta
        p, d, r, n = len(meta.layers), meta.d, meta.r, meta.width
        g = torch.Generator().manual_seed(0)  # the same initial predictors on every run
        self.w1 = nn.Parameter(torch.randn(p, d, r, generator=g) / d ** 0.5)
        self.w2 = nn.Parameter(torch.randn(p, r, n, generator=g) / r ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(p, n))
        self.slot = {layer: j for j, layer in enumerate(meta.layers)}
        # per layer its (w1, w2, b2) as views, made once: a decode step pays no indexing for them
        self._views: dict[int, tuple[torch.Tensor, ...]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (P, N, d) -> logits (P, N, d_ff), one row of inputs per predicted layer."""
        return torch.baddbmm(self.b2[:, None], torch.relu(x @ self.w1), self.w2)

    def logits(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        """x (..., d) -> logits (..., d_ff) of the predictor for ``layer``."""
        w1, w2, b2 = self._layer(layer, x)
        z = torch.mm(x.reshape(-1, x.shape[-1]), w1).relu_()  # (N, r)
        return torch.addmm(b2, z, w2).view(*x.shape[:-1], -1)  # (..., d_ff)

    def _layer(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The predictor of ``layer`` as (w1 (d, r), w2 (r, n), b2 (n,)) in x's dtype and on its device: views of
        the stacked parameters (training updates them in place), remade only when the dtype or device moves."""
        views = self._views.get(layer)
        if views is None or views[0].dtype != x.dtype or views[0].device != x.device:
            j = self.slot[layer]
            views = self._views[layer] = tuple(t[j].detach().to(x) for t in (self.w1, self.w2, self.b2))
        return views

    def cost(self, gated: bool = True) -> dict[str, float]:
        """Parameters per layer and multiply-adds per token as a share of the layer's MLP (3 d d_ff gated)."""
        m = self.meta
        macs = m.d * m.r + m.r * m.width
        params = macs + m.width
        return {"params_per_layer": params, "macs_per_token": macs,
                "flops_share_of_mlp": macs / ((3 if gated else 2) * m.d * m.d_ff)}


def new_predictors(model: nn.Module, name: str, r: int, keep: float, source: str, unit: str = "neurons") -> Predictors:
    if source not in SOURCES or unit not in UNITS:
        raise UsageError(f"predictor source {source!r} of {unit!r}: choose {' or '.join(SOURCES)} of "
                         f"{' or '.join(UNITS)}")
    keep_count(1, keep)
    dm = arch.dims(model)
    layers = tuple(range(1 if source == "lookahead" else 0, dm.n_layers))
    return Predictors(Meta(name, model_fingerprint(model), dm.n_layers, dm.d_model, dm.d_ff, r, keep, source, layers,
                           unit, dm.n_heads if unit == "heads" else 0))


def memory_bytes() -> int:
    """The memory this process can have: the machine's physical memory, or its cgroup's limit where lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        return min(total, int(limit)) if limit.isdigit() else total
    except OSError:
        return total


def training_bytes(model: nn.Module, r: int, units: tuple[str, ...], batch: int, window: int) -> int:
    """The float32 bytes training rank-``r`` predictors of each unit in ``units`` (both sources) holds at once:
    every set's weights, their gradients and AdamW's two moments (4 copies), a batch's hidden and output
    activations with their gradients (3 copies), and one traced window's inputs and targets."""
    dm = arch.dims(model)
    floats = 0
    for unit in units:
        n = dm.d_ff if unit == "neurons" else dm.n_heads
        for source in SOURCES:
            p = dm.n_layers - (source == "lookahead")  # the layers a set predicts
            floats += 4 * p * (dm.d_model * r + r * n + n) + 3 * p * batch * (r + n)
        floats += dm.n_layers * window * (dm.d_model + 2 * n)  # x (L, W, d), magnitudes and labels (L, W, n)
    return 4 * floats


def check_fits(model: nn.Module, r: int, units: tuple[str, ...], batch: int, window: int) -> None:
    """ConfigError (one line) when training rank-``r`` predictors cannot fit in this machine's memory beside
    the model's weights: refused before anything is allocated, rather than killed by the kernel."""
    have = memory_bytes() - sum(p.numel() * p.element_size() for p in model.parameters())
    need = training_bytes(model, r, units, batch, window)
    if need <= have:
        return
    fixed, at_1 = training_bytes(model, 0, units, batch, window), training_bytes(model, 1, units, batch, window)
    fits = (have - fixed) // (at_1 - fixed)  # bytes grow linearly in r
    fix = f"give rank <= {fits} (the most that fits by this estimate; e.g. 128)" if fits >= 1 else "lower batch"
    raise ConfigError(f"rank={r}: training the predictors ({' and '.join(units)} of {arch.dims(model).n_layers} "
                      f"layers, both sources, with gradients and AdamW's two moments) needs about "
                      f"{need / 2**30:.1f} GiB, more than the {have / 2**30:.1f} GiB of memory this machine has beside "
                      f"the model's weights: {fix}")


# --------------------------------------------------------------------------- training data and training
@torch.no_grad()
def windows(model: nn.Module, ids: torch.Tensor, keep: float, window: int, unit: str = "neurons"):
    """Per non-overlapping window of ``ids`` (T,): (x (L, W, d), oracle (L, W, n) bool, magnitudes (L, W, n)):
    neurons: x the MLP input, |h|; heads: x the attention input, ‖z_h‖."""
    n = arch.dims(model).n_layers
    device = next(model.parameters()).device
    x_name, v_name = UNITS[unit]
    with Trace(model, [f"blocks.*.{x_name}", f"blocks.*.{v_name}"]) as tr:
        for start in range(0, ids.numel() - 1, window):
            model(ids[None, start:start + window].to(device), use_cache=False)
            x = torch.stack([tr[f"blocks.{i}.{x_name}"][0] for i in range(n)]).float()  # (L, W, d)
            v = torch.stack([tr[f"blocks.{i}.{v_name}"][0] for i in range(n)]).float()  # (L, W, d_ff | H, d_h)
            a = v.abs() if unit == "neurons" else v.norm(dim=-1)  # (L, W, n)
            yield x, topk_mask(a, keep), a


def inputs_for(x: torch.Tensor, source: str) -> torch.Tensor:
    """x (L, W, d) -> the predictors' inputs: own (L, W, d) or lookahead x_{i-1} for layers 1..L-1 (L-1, W, d)."""
    return x if source == "own" else x[:-1]


def targets_for(y: torch.Tensor, source: str) -> torch.Tensor:  # (L, W, n) -> the predicted layers' rows
    return y if source == "own" else y[1:]


def _to_model(preds: list[Predictors], model: nn.Module) -> None:
    """The predictors onto the device of the activations they read, the model's (made or loaded on the CPU,
    they met a GPU model's activations: "Expected all tensors to be on the same device")."""
    device = next(model.parameters()).device
    for p in preds:
        p.to(device)


def train(preds: list[Predictors], model, ids: torch.Tensor, epochs: int, window: int = 512, batch: int = 256,
          lr: float = 1e-3, progress=None) -> list[float]:
    """Trains every predictor in ``preds`` (same keep and unit) on ``ids``, one model pass per epoch; the last
    epoch's mean BCE per predictor set."""
    keep, unit = preds[0].meta.keep, preds[0].meta.unit
    _to_model(preds, model)  # before the optimizers: they hold the parameters, which move in place
    opts = [torch.optim.AdamW(p.parameters(), lr=lr, weight_decay=0.01) for p in preds]
    gen = torch.Generator().manual_seed(0)
    for p in preds:
        p.train()
    for _ in range(epochs):
        sums, count = [0.0] * len(preds), 0
        for x, y, _ in windows(model, ids, keep, window, unit):
            order = torch.randperm(x.shape[1], generator=gen)
            for b in order.split(batch):
                for j, (p, opt) in enumerate(zip(preds, opts)):
                    logits = p(inputs_for(x, p.meta.source)[:, b])  # (P, batch, n)
                    loss = F.binary_cross_entropy_with_logits(logits, targets_for(y, p.meta.source)[:, b].float())
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sums[j] += float(loss.detach()) * b.numel()
                count += b.numel()
            if progress is not None:
                progress.update(x.shape[1])
    for p in preds:
        p.eval()
    return [s / max(count, 1) for s in sums]


# --------------------------------------------------------------------------- scoring
@torch.no_grad()
def score(preds: list[Predictors], model, ids: torch.Tensor, window: int = 512, progress=None) -> dict:
    """Per predictor set and layer, on ``ids`` (held out: never the training text), against the dense
    model's oracle top-k set (k = keep of the n units): ``recall`` of the oracle set by the predicted top-k
    set (the same size, so recall = precision; chance = keep), ``mass`` the share of |h| (heads: ‖z_h‖) the
    predicted set captures (``oracle_mass``: what the oracle's captures), and the thresholded set
    sigmoid(logit) > 0.5 (Deja Vu's): its size ``t_size`` as a share of n and its recall ``t_recall``."""
    keep, unit = preds[0].meta.keep, preds[0].meta.unit
    _to_model(preds, model)
    keys = ("recall", "mass", "t_size", "t_recall", "oracle_mass", "total")
    sums = [{k: torch.zeros(len(p.meta.layers), dtype=torch.float64) for k in keys} for p in preds]
    count = 0
    for x, y, h in windows(model, ids, keep, window, unit):
        for p, s in zip(preds, sums):
            logits = p(inputs_for(x, p.meta.source))  # (P, W, n)
            oracle, a = targets_for(y, p.meta.source), targets_for(h, p.meta.source)  # (P, W, n)
            pred, t = topk_mask(logits, keep), logits > 0  # (P, W, n)
            k = oracle.sum(-1).double()  # (P, W)
            s.update(zip(keys, follow(k, *(s[key] for key in keys))))
            s["recall"] += ((pred & oracle).sum(-1) / k).sum(-1)
            s["mass"] += (a * pred).sum((1, 2)).double()
            s["oracle_mass"] += (a * oracle).sum((1, 2)).double()
            s["t_size"] += t.double().mean(-1).sum(-1)
            s["t_recall"] += ((t & oracle).sum(-1) / k).sum(-1)
            s["total"] += a.sum((1, 2)).double()
        count += x.shape[1]
        if progress is not None:
            progress.update(x.shape[1])
    out = {}
    for p, s in zip(preds, sums):
        s = {key: v.cpu() for key, v in s.items()}
        total = s.pop("total")
        per = {k: (v / (total if k.endswith("mass") else count)).tolist() for k, v in s.items()}
        out[p.meta.source] = {"layers": list(p.meta.layers), **per}
    return out
