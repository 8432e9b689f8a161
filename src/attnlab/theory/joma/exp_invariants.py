"""``joma-invariants``: Theorem 1 measured — z(t) against ẑ(t) predicted from V(t) = U_Cᵀ W(t)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.core.plotting import plt
from attnlab.theory.joma.invariants import cooccurrence_table, pearson, relative_error, zhat
from attnlab.theory.joma.model import JomaLayer, attention, make_embedding, train


@dataclass(frozen=True)
class InvariantsConfig:
    # the authors' verification setup (joma/draw_figure_2_3.py)
    num_distinct: int = 10
    num_common: int = 10
    num_classes: int = 20
    hidden: int = 20  # K; linear-φ runs feed h to the loss directly, so K must equal num_classes
    d: int = 30
    embedding: str = "identity"  # identity (authors) | random | path to a .npy/.pt (d, M_c+1) matrix
    seeds: int = 20
    # softmax attention, as published: τ = 0.5, SGD lr 0.1 on W and z, 2000 steps, N(0,1)/100 init
    tau: float = 0.5
    lr: float = 0.1
    steps: int = 2000
    init_std: float = 0.01
    corr_steps: tuple[int, ...] = (500, 2000)
    corr_min: tuple[float, ...] = (0.99, 0.95)
    # linear / exp attention from zero init at a small step, run to time η·steps = horizon
    small_lr: float = 0.02
    horizon: float = 200.0
    max_rel_error: float = 0.01
    relu_init_std: float = 0.1  # the ReLU + head runs start small and random (ReLU'(0) = 0)
    record_every: int = 10

    def __post_init__(self):
        for name in ("num_distinct", "num_classes", "hidden", "d", "seeds", "steps", "record_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)}: use a positive integer")
        if self.num_common < 0:
            raise ConfigError(f"num_common={self.num_common}: use 0 or more")
        for name in ("tau", "lr", "small_lr", "horizon", "init_std", "relu_init_std", "max_rel_error"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ConfigError(f"{name}={getattr(self, name)}: use a positive number")
        if len(self.corr_steps) != len(self.corr_min):
            raise ConfigError("corr_steps and corr_min must have equal length (one threshold per step)")
        if any(not 0 <= s <= self.steps for s in self.corr_steps):
            raise ConfigError(f"corr_steps={self.corr_steps} must lie within 0..steps={self.steps}")
        if self.horizon / self.small_lr > 200_000:
            raise ConfigError(f"horizon/small_lr = {self.horizon / self.small_lr:.0f} steps: keep it under 200000")

    @property
    def num_contextual(self) -> int:
        return self.num_distinct + self.num_common


def _tables(cfg: InvariantsConfig, kind: str, gen: torch.Generator) -> torch.Tensor:
    """One P(l|k) table per seed, as the authors draw one per run. -> (S, M_c, K)."""
    return torch.stack([cooccurrence_table(cfg.num_distinct, cfg.num_common, cfg.num_classes, kind, gen)
                        for _ in range(cfg.seeds)])


def _record(steps: int, every: int) -> list[int]:
    return sorted(set(range(0, steps + 1, every)) | {steps})


@register(
    "joma-invariants",
    "JoMA Theorem 1: z(t) vs the invariant's ẑ from V(t) — linear/exp attention exact, softmax (authors' setup) correlated.",
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
    S, K, C = cfg.seeds, cfg.hidden, cfg.num_classes
    U = make_embedding(cfg.embedding, cfg.d, cfg.num_contextual)
    y = torch.arange(C)  # one input per class: x = P(·|k), the class's expected token frequencies
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
    total = 2 * cfg.steps + sum(c[-1] for c in cases)
    runs = {}
    with ctx.progress(total, "joma-invariants") as bar:
        tick = lambda _: bar.update()  # noqa: E731
        X = _tables(cfg, "random", gen)  # (S, M_c, C)
        x = X.transpose(1, 2).contiguous()  # (S, C, M_c): one input per class and run
        for name, form, act, head, lr, steps in cases:
            layer = JomaLayer(U, form, 1.0, act, "ce", head)
            g = torch.Generator().manual_seed(1)  # every case starts from the same draws
            if act == "linear":
                # zero init; linear attention's z = 0 is stationary (b = x∘z = 0), so it starts at z = 1
                W0, head0 = torch.zeros(S, cfg.d, K), None
            else:
                W0 = torch.randn(S, cfg.d, K, generator=g) * cfg.relu_init_std
                head0 = torch.randn(S, K, C, generator=g) / K ** 0.5
            z0 = torch.zeros(S, cfg.num_contextual) if form == "exp" else torch.ones(S, cfg.num_contextual)
            h = train(layer, x, y, W0, z0, lr, lr, steps, head0, _record(steps, cfg.record_every), tick)
            zh = zhat(form, h.V, h.z[0])
            runs[name] = (h, zh, relative_error(h.z, zh))  # rel error: (S,)
        corr, diagnostics = {}, {}
        for kind in ("gaussian", "random"):
            Xs = _tables(cfg, kind, gen)
            layer = JomaLayer(U, "softmax", cfg.tau, "linear", "ce", "none")
            W0 = torch.randn(S, cfg.d, K, generator=gen) * cfg.init_std
            z0 = torch.randn(S, cfg.num_contextual, generator=gen) * cfg.init_std
            h = train(layer, Xs.transpose(1, 2).contiguous(), y, W0, z0, cfg.lr, cfg.lr, cfg.steps, None,
                      _record(cfg.steps, cfg.record_every), tick)
            # the authors' estimate: b̄ = mean attention at z = 0, ‖W‖²_F for the norm term
            zh = zhat("softmax", h.V, h.z[0], 1.0, cfg.tau, bbar=Xs.mean(-1), norm_sq=h.W_sq)
            corr[kind] = (h.steps, pearson(h.z, zh), h, zh)  # corr: (T, S)
            diagnostics[kind] = _softmax_diagnostics(h, Xs.transpose(1, 2), cfg.tau)

    claims = []
    for name in ("exp", "linear"):
        err = runs[name][2]
        claims.append(check(f"Theorem 1, {name} attention, zero init, step {cfg.small_lr:g}: max over runs of "
                            "max_t ‖z − ẑ‖ / max_t ‖z − z(0)‖", err.max(), 0.0, cfg.max_rel_error, "at_most"))
    ratio = float(runs["exp (step x2)"][2].median() / runs["exp"][2].median())
    claims.append(check("the residual is Euler's O(η) error, not a broken invariant: doubling the step doubles "
                        "it (median error ratio, exp attention)", ratio, 2.0, 0.15, "rel"))
    for kind in ("gaussian", "random"):
        steps, c, _, _ = corr[kind]
        for s, thr in zip(cfg.corr_steps, cfg.corr_min):
            c_s = c[steps.index(s)]
            claims.append(check(f"Theorem 1, softmax ({kind} P), authors' setup: Pearson(ẑ, z) at step {s} "
                                f"(median over {S} seeds; {int((c_s >= thr).sum())}/{S} seeds reach {thr})",
                                c_s.median(), thr, 0.0, "at_least"))

    _figure(cfg, ctx, runs, corr)
    relu = {name: runs[name][2] for name in ("exp, ReLU + head", "linear, ReLU + head")}
    metrics = {
        "relative_error": {name: r[2].tolist() for name, r in runs.items()},
        "final_loss": {name: r[0].loss[-1].tolist() for name, r in runs.items()},
        "softmax_correlation": {
            kind: {str(s): c[steps.index(s)].tolist() for s in cfg.corr_steps} for kind, (steps, c, _, _) in corr.items()
        },
        "small_step_steps": small_steps,
        "softmax_diagnostics": diagnostics,
    }
    summary = (
        f"Linear and exp attention follow their invariants up to Euler's step error, which halves with the step "
        f"(ratio {ratio:.2f}). With ReLU and a trained head (small random init, c from the init; Theorem 1 needs "
        f"no assumption on φ) the relative error at the same step has median {relu['exp, ReLU + head'].median():.2g} "
        f"and max {relu['exp, ReLU + head'].max():.2g} over runs (exp attention), median "
        f"{relu['linear, ReLU + head'].median():.2g} and max {relu['linear, ReLU + head'].max():.2g} (linear); "
        "a large max comes from a run whose exp attention grows large as its loss nears 0, where the flow is "
        "stiff and Euler's error is largest. The softmax estimate is the "
        "authors' (b̄ = mean attention at z = 0, ‖W‖²_F); it assumes b stays near b̄, which random P violates "
        "more than Gaussian bumps, hence the lower late correlation there."
    )
    d = diagnostics["random"]
    summary += (
        f" Investigation (random P): the mean attention b̄ moves by up to {d['max_bbar_drift']:.2f} "
        f"(from at most {d['max_bbar_init']:.2f}) by the last step; replacing the constant b̄ by the measured "
        f"b̄(t) integrated along the path gives median Pearson {d['path_corr_final_median']:.3f} at the last step "
        f"(authors' constant b̄: {d['authors_corr_final_median']:.3f}), so the drift of b̄ alone does not explain "
        "the gap: the theorem's decoupling condition E[g b bᵀ v] ≈ b̄ E[g bᵀ v] is what random P breaks."
    )
    return Result(claims, metrics, {"invariants.png": (
        "Theorem 1: z (solid) vs ẑ from V (dashed) for linear and exp attention; relative error over time; "
        "Pearson(ẑ, z) under softmax attention in the authors' setup (median and min–max over seeds).")}, summary)


def _softmax_diagnostics(h, x: torch.Tensor, tau: float) -> dict:
    """Why softmax's ẑ drifts: how far b̄ moves, and ẑ with the measured b̄(t) in the norm term
    (trapezoid along the recorded path). x: (S, C, M_c)."""
    bbar = torch.stack([attention(z, x, "softmax", tau).mean(1) for z in h.z])  # (T, S, M_c)
    norm_sq = h.V.pow(2).sum((-2, -1))  # (T, S)
    step = 0.5 * (bbar[1:] + bbar[:-1]) * norm_sq.diff(dim=0)[..., None]  # (T-1, S, M_c)
    integral = torch.cat([torch.zeros_like(bbar[:1]), step.cumsum(0)])
    q = h.V.pow(2).sum(-1)
    zh_path = h.z[0] + (q - q[0] - integral) / (2 * tau)
    zh_const = zhat("softmax", h.V, h.z[0], 1.0, tau, bbar=bbar[0], norm_sq=norm_sq)
    return {
        "max_bbar_drift": float((bbar[-1] - bbar[0]).abs().max()),
        "max_bbar_init": float(bbar[0].max()),
        "path_corr_final_median": float(pearson(h.z, zh_path)[-1].median()),
        "authors_corr_final_median": float(pearson(h.z, zh_const)[-1].median()),
    }


def _figure(cfg, ctx, runs, corr) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8), layout="constrained")
    colors = plt.get_cmap("tab10").colors
    for ax, name in zip(axes[:2], ("exp", "linear")):
        h, zh, _ = runs[name]
        steps = np.asarray(h.steps)
        for i, l in enumerate((0, 3, 6, cfg.num_distinct, cfg.num_contextual - 1)[:5]):
            if l >= cfg.num_contextual:
                continue
            ax.plot(steps, h.z[:, 0, l], color=colors[i], lw=2, label=f"token {l}")
            ax.plot(steps, zh[:, 0, l], color="k", ls="--", lw=0.8)
        ax.set_title(f"{name} attention: z (colour) vs ẑ from V (dashed)")
        ax.set_xlabel("step")
        ax.set_ylabel(r"$z_l$")
        ax.legend(fontsize=7)
    ax = axes[2]
    for name, (h, zh, _) in runs.items():
        err = (h.z - zh).norm(dim=-1) / (h.z - h.z[0]).norm(dim=-1).amax(0)  # (T, S)
        ax.semilogy(np.asarray(h.steps) * (2 if "x2" in name else 1), err.median(1).values.clamp_min(1e-16), label=name)
    ax.axhline(cfg.max_rel_error, color="k", ls=":", lw=0.8)
    ax.set_ylim(bottom=1e-7)
    ax.set_xlabel(f"time (steps of {cfg.small_lr:g})")
    ax.set_title(r"$\|z-\hat z\|$ / max$\|z-z(0)\|$ (median over seeds)")
    ax.legend(fontsize=7)
    ax = axes[3]
    for kind, color in (("gaussian", "tab:red"), ("random", "tab:blue")):
        steps, c, _, _ = corr[kind]
        ax.plot(steps, c.median(1).values, color=color, label=f"{kind} P (median)")
        ax.fill_between(steps, c.amin(1), c.amax(1), color=color, alpha=0.2)
    for s, thr in zip(cfg.corr_steps, cfg.corr_min):
        ax.plot([s], [thr], "k_", ms=14)
    ax.set_xlabel("step")
    ax.set_title(r"softmax: Pearson($\hat z$, z), authors' setup")
    ax.legend(fontsize=7)
    ctx.savefig(fig, "invariants.png")
