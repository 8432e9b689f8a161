"""``joma-invariants``: Theorem 1 measured — z(t) against ẑ(t) predicted from V(t) = U_Cᵀ W(t).

Linear and exp attention (exact invariants) from zero init at a small step, with linear φ and with
ReLU + a trained head; softmax attention (approximate) in the authors' setup (``draw_figure_2_3.py``).
The runs are in :mod:`attnlab.theory.joma.invariants`, the figure in :mod:`attnlab.theory.joma.plots`.
"""
from __future__ import annotations

import torch

from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.theory.joma import plots
from attnlab.theory.joma.invariants import (
    InvariantsConfig,
    cooccurrence_tables,
    exact_invariant_run,
    softmax_invariant_run,
)
from attnlab.theory.joma.model import make_embedding

TALK_ORDER = 1  # the JoMA part of the talk: Theorem 1 first


@register(
    "joma-invariants",
    "JoMA Theorem 1: z(t) vs the invariant's ẑ from V(t) — linear/exp attention exact, "
    "softmax (authors' setup) correlated.",
    InvariantsConfig,
    quick={"seeds": 5, "small_lr": 0.05},
)
def run_invariants(cfg: InvariantsConfig, ctx) -> Result:
    torch.set_default_dtype(torch.float64)  # the invariants are checked to 1e-4: keep rounding out of it
    try:
        return _run(cfg, ctx)
    finally:
        torch.set_default_dtype(torch.float32)


def _run(cfg: InvariantsConfig, ctx) -> Result:
    U = make_embedding(cfg.embedding, cfg.d, cfg.num_contextual)
    y = torch.arange(cfg.num_classes)  # one input per class: x = P(·|k), the class's expected token frequencies
    gen = torch.Generator().manual_seed(0)
    small_steps = round(cfg.horizon / cfg.small_lr)
    # (name, attention, activation, head, lr, steps); linear-φ runs use head=none, ReLU runs a trained head
    cases = [
        ("exp", "exp", "linear", "none", cfg.small_lr, small_steps),
        ("linear", "linear", "linear", "none", cfg.small_lr, small_steps),
        ("exp (step x2)", "exp", "linear", "none", 2 * cfg.small_lr, small_steps // 2),
        ("exp, ReLU + head", "exp", "relu", "linear", cfg.small_lr, small_steps),
        ("linear, ReLU + head", "linear", "relu", "linear", cfg.small_lr, small_steps),
    ]
    runs, corr, diagnostics = {}, {}, {}
    with ctx.progress(2 * cfg.steps + sum(c[-1] for c in cases), "joma-invariants") as bar:
        tick = lambda _: bar.update()  # noqa: E731
        X = cooccurrence_tables(cfg.seeds, cfg.num_distinct, cfg.num_common, cfg.num_classes,
                                "random", gen)  # (S, M_c, C)
        x = X.transpose(1, 2).contiguous()  # (S, C, M_c): one input per class and run
        for name, form, act, head, lr, steps in cases:
            init_std = cfg.relu_init_std if act == "relu" else 0.0
            runs[name] = exact_invariant_run(U, x, y, form, act, head, lr, steps, cfg.hidden, init_std,
                                             cfg.record_every, tick)
        for kind in ("gaussian", "random"):
            X = cooccurrence_tables(cfg.seeds, cfg.num_distinct, cfg.num_common, cfg.num_classes, kind, gen)
            h, c, diagnostics[kind] = softmax_invariant_run(U, X, y, cfg.tau, cfg.lr, cfg.steps, cfg.hidden,
                                                            cfg.init_std, cfg.record_every, gen, tick)
            corr[kind] = (h.steps, c)  # c: (T, S)

    plots.invariants(runs, corr, cfg.num_distinct, cfg.num_contextual, cfg.small_lr, cfg.max_rel_error,
                     cfg.corr_steps, cfg.corr_min, ctx)
    claims = _claims(cfg, runs, corr, diagnostics["random"])
    metrics = {
        "relative_error": {name: r.rel_error.tolist() for name, r in runs.items()},
        "final_loss": {name: r.h.loss[-1].tolist() for name, r in runs.items()},
        "softmax_correlation": {
            kind: {str(s): c[steps.index(s)].tolist() for s in cfg.corr_steps} for kind, (steps, c) in corr.items()
        },
        "small_step_steps": small_steps,
        "softmax_diagnostics": diagnostics,
    }
    last = cfg.corr_steps[-1] if cfg.corr_steps else corr["random"][0][-1]
    summary = (
        f"Linear and exp attention follow Theorem 1's invariants up to Euler's step error (max relative error "
        f"{runs['exp'].rel_error.max():.1e} and {runs['linear'].rel_error.max():.1e}; doubling the step multiplies "
        f"it by {claims[2].measured:.2f}), and under softmax attention the authors' ẑ keeps median Pearson "
        + " and ".join(f"{c[steps.index(last)].median():.3f} ({kind} P)" for kind, (steps, c) in corr.items())
        + f" at step {last}.")
    return Result(claims, metrics, {"invariants.png": (
        "Theorem 1: z (solid) vs ẑ from V (dashed) for linear and exp attention; relative error over time; "
        "Pearson(ẑ, z) under softmax attention in the authors' setup (median and min–max over seeds).")}, summary)


def _claims(cfg: InvariantsConfig, runs: dict, corr: dict, d: dict) -> list:
    S = cfg.seeds
    claims = []
    for name in ("exp", "linear"):
        relu = runs[f"{name}, ReLU + head"].rel_error
        claims.append(check(f"Theorem 1, {name} attention, zero init, step {cfg.small_lr:g}: max over runs of "
                            "max_t ‖z − ẑ‖ / max_t ‖z − z(0)‖", runs[name].rel_error.max(), 0.0, cfg.max_rel_error,
                            "at_most").because(
            f"With ReLU and a trained head (small random init, c from the init; Theorem 1 needs no assumption on φ) "
            f"the relative error at the same step has median {relu.median():.2g} and max {relu.max():.2g} over runs; "
            "a large max comes from a run whose attention grows large as its loss nears 0, where the flow is stiff "
            "and Euler's error is largest."))
    ratio = float(runs["exp (step x2)"].rel_error.median() / runs["exp"].rel_error.median())
    claims.append(check("the residual is Euler's O(η) error, not a broken invariant: doubling the step doubles "
                        "it (median error ratio, exp attention)", ratio, 2.0, 0.15, "rel"))
    for kind in ("gaussian", "random"):
        steps, c = corr[kind]
        for s, thr in zip(cfg.corr_steps, cfg.corr_min):
            c_s = c[steps.index(s)]
            claim = check(f"Theorem 1, softmax ({kind} P), authors' setup: Pearson(ẑ, z) at step {s} "
                          f"(median over {S} seeds; {int((c_s >= thr).sum())}/{S} seeds reach {thr})",
                          c_s.median(), thr, 0.0, "at_least")
            if kind == "random" and s == cfg.corr_steps[-1]:
                claim = claim.because(
                    "The softmax estimate is the authors' (b̄ = mean attention at z = 0, ‖W‖²_F); it assumes b stays "
                    "near b̄, which random P violates more than Gaussian bumps, hence the lower late correlation. "
                    f"Investigation: the mean attention b̄ moves by up to {d['max_bbar_drift']:.2f} (from at most "
                    f"{d['max_bbar_init']:.2f}) by the last step; replacing the constant b̄ by the measured b̄(t) "
                    f"integrated along the path gives median Pearson {d['path_corr_final_median']:.3f} at the last "
                    f"step (authors' constant b̄: {d['authors_corr_final_median']:.3f}), so the drift of b̄ alone does "
                    "not explain the gap: the theorem's decoupling condition E[g b bᵀ v] ≈ b̄ E[g bᵀ v] is what "
                    "random P breaks. The controlled experiment joma-invariants-coupling measures the term that "
                    "condition drops, step by step and seed by seed: the invariant's error follows it across seeds, "
                    "and that term with b̄'s drift accounts for all of what ẑ misses.")
            claims.append(claim)
    return claims
