"""``quant-agreement``: does a weight scheme (int8 by default) keep the model? Top-1 agreement with the float model
and perplexity.

A real model's next-token predictions over a text, in windows of ``window`` tokens (each its own forward
from position 0), once with its float weights and once inside ``QuantizedWeights``: the share of positions
whose argmax agrees, and the perplexity of each. The claims' thresholds are the issue's, fixed before the
first run: agreement >= 99% of positions, perplexity within 1%. Each claim carries the 95% paired-bootstrap
interval over the windows (the unit that is its own forward: a window's positions share its rounding's draws,
and under W8A8 a last-bit change upstream moves an activation to the neighbouring int8 level, so a window's
score is one draw of the scheme's noise); it holds or fails only where that interval decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check, finding
from attnlab.experiments.intervals import RESAMPLES, paired_bootstrap
from attnlab.experiments.registry import Result, register
from attnlab.methods.base import CALIBRATION_TEXT, CALIBRATION_TOKENS
from attnlab.methods.configured import configured, enter_configured, methods_option
from attnlab.quant.schemes import SCHEMES


@dataclass(frozen=True)
class QuantAgreement:
    model: str = "smollm2"
    text: str = "wikitext-2/test.txt"
    tokens: int = 16384
    window: int = 512
    scheme: str = "int8"
    calibration: str = CALIBRATION_TEXT  # what a calibrated scheme (smoothquant) reads: never the text scored
    calibration_tokens: int = CALIBRATION_TOKENS
    methods: tuple[str, ...] = methods_option()  # RoPE scalings both sides run under

    METHOD_KINDS: ClassVar = ("rope",)
    METHOD_WHY: ClassVar = ("quant-agreement compares its scheme (--set scheme=) with float weights; a sparsity rule "
                            "would replace the projections it quantizes, and one forward per window reads no KV "
                            "cache: give a RoPE scaling")
    # claim thresholds, fixed before the first run (issue 34)
    agreement: float = 0.99  # top-1 agreement with the float model, share of scored positions, at least
    ppl_tol: float = 0.01  # |PPL_quant / PPL_float - 1| at most

    def __post_init__(self):
        configured(self)  # an unknown method or option, one of a kind it cannot apply: one line, before the model
        SCHEMES.get(self.scheme)  # an unknown scheme: did you mean
        if self.calibration_tokens < 1:
            raise ConfigError(f"calibration_tokens={self.calibration_tokens}: need at least 1")
        if self.window < 2 or self.tokens < self.window:
            raise ConfigError(f"tokens={self.tokens}, window={self.window}: need tokens >= window >= 2")


def windowed(logits_of, ids: torch.Tensor, window: int, progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (T,) -> (argmax (P,), NLL (P,) float64) at every position but each window's first, windows of
    ``window`` tokens from position 0 each; ``logits_of(win)`` gives a window's (w,) logits (w, V), each window
    its own forward (another engine's too: benchmarks/bench_llamacpp_ppl.py scores llama.cpp through this)."""
    tops, nlls = [], []
    for start in range(0, ids.numel() - 1, window):
        win = ids[start:start + window]  # (w,)
        logits = logits_of(win)[:-1].float()  # (w-1, V), on the engine's device: only the results come back
        nxt = win[1:, None].to(logits.device)
        tops.append(logits.argmax(-1).cpu())
        nlls.append(-F.log_softmax(logits, -1).gather(-1, nxt)[:, 0].double().cpu())
        if progress is not None:
            progress.update(win.numel())
    return torch.cat(tops), torch.cat(nlls)


def per_window(ids_len: int, window: int, *values: torch.Tensor) -> np.ndarray:
    """Positions' values (P,) of :func:`windowed` -> (windows, len(values) + 1): each window's sum of each,
    then its count of positions (window w's are its tokens less the first)."""
    lengths = [min(window, ids_len - s) - 1 for s in range(0, ids_len - 1, window)]
    sums = [[float(part.double().sum()) for part in torch.split(v, lengths)] for v in values]
    return np.array([*sums, lengths], dtype=float).T


def window_intervals(ids_len: int, window: int, agree: torch.Tensor, nll_q: torch.Tensor,
                     nll_f: torch.Tensor) -> tuple[tuple[float, float], tuple[float, float], int]:
    """The 95% paired-bootstrap intervals, resampling windows, of the top-1 agreement and of PPL_q / PPL_f - 1:
    (agreement's, the ratio's, the windows' n)."""
    w = per_window(ids_len, window, agree, nll_q, nll_f)  # (windows, 4): agreeing, NLL_q, NLL_f, positions
    share = paired_bootstrap(lambda s: float(s[0][:, 0].sum() / s[0][:, 3].sum()), [w])
    ratio = paired_bootstrap(lambda s: math.expm1(float((s[0][:, 1].sum() - s[0][:, 2].sum()) / s[0][:, 3].sum())),
                             [w])
    return share, ratio, len(w)


@torch.no_grad()
def predictions(model, ids: torch.Tensor, window: int, progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`windowed` through ``model``'s own forward."""
    device = next(model.parameters()).device
    return windowed(lambda win: model(win[None].to(device), use_cache=False).logits[0], ids, window, progress)


@register("quant-agreement", "a weight scheme (int8 unless --set scheme=) vs float: top-1 agreement and perplexity",
          QuantAgreement, quick={"tokens": 1024})
def run_agreement(cfg: QuantAgreement, ctx) -> Result:
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.quant.transform import QuantizedWeights

    model, tok = load_model(cfg.model, ctx.device)
    enter_configured(cfg, model, tok, ctx)  # under both the float and the quantized predictions
    ids = text_ids(tok, cfg.text, cfg.tokens)
    calib = (text_ids(tok, cfg.calibration, cfg.calibration_tokens, "--set calibration=PATH")
             if SCHEMES.get(cfg.scheme).calibrated else None)
    with ctx.progress(ids.numel(), "float") as bar:
        top_f, nll_f = predictions(model, ids, cfg.window, bar)
    with QuantizedWeights(model, cfg.scheme, calibration=calib) as q, \
            ctx.progress(ids.numel(), cfg.scheme) as bar:
        top_q, nll_q = predictions(model, ids, cfg.window, bar)
        float_bytes, quant_bytes = q.nbytes()
    agree = float((top_f == top_q).double().mean())
    ppl_f, ppl_q = math.exp(float(nll_f.mean())), math.exp(float(nll_q.mean()))
    share_ci, ratio_ci, n = window_intervals(ids.numel(), cfg.window, (top_f == top_q), nll_q, nll_f)
    how = f"paired bootstrap over windows, {RESAMPLES} resamples"
    claims = [
        check(f"{cfg.scheme} top-1 agrees with float at >= {cfg.agreement:.0%} of positions ({agree:.4f})",
              agree, cfg.agreement, 0.0, "at_least", interval=share_ci, n=n, method=how),
        check(f"{cfg.scheme} perplexity within {cfg.ppl_tol:.0%} of float ({ppl_q:.3f} vs {ppl_f:.3f})",
              ppl_q / ppl_f - 1, 0.0, cfg.ppl_tol, "abs", interval=ratio_ci, n=n, method=how),
        finding(f"projection weights read per token: {cfg.scheme} bytes / float bytes", quant_bytes / float_bytes),
    ]
    metrics = {"model": cfg.model, "text": cfg.text, "positions": int(top_f.numel()), "scheme": cfg.scheme,
               "calibration": None if calib is None else {"text": cfg.calibration, "tokens": int(calib.numel())},
               "top1_agreement": agree, "ppl_float": ppl_f, "ppl_quant": ppl_q, "ppl_ratio": ppl_q / ppl_f,
               "float_bytes": float_bytes, "quant_bytes": quant_bytes,
               "nll_mean_abs_diff": float((nll_q - nll_f).abs().mean())}
    summary = (f"{cfg.scheme}: top-1 agreement {agree:.4f} over {top_f.numel()} positions of {cfg.text}; "
               f"PPL {ppl_q:.3f} vs float {ppl_f:.3f} ({ppl_q / ppl_f - 1:+.2%}); projection bytes "
               f"{quant_bytes / 1e6:.1f} MB vs {float_bytes / 1e6:.1f} MB.")
    return Result(claims, metrics, {}, summary)
