"""``contextual-sparsity``: how much of a real model's MLP and attention can be dropped per token.

Perplexity on WikiText-2 test against the share of MLP neurons kept, for every registered rule that needs
no trained predictors (attnlab.sparsity.registry), each deciding per token and layer which neurons of
h = act(gate(x)) · up(x) (the input of down_proj) survive: the oracle (top-k
of |h|, Deja Vu's contextual sparsity), CATS (threshold |act(gate(x))|), TEAL (threshold |x| entering
the MLP and |h| entering down_proj) and a static set (the same most-active neurons for every token).
Thresholds and static sets come from a calibration text, never the evaluation one. Also: the per-layer
profile at 50 %, the residual stream's cosine across layers (Deja Vu's "slowly changing embeddings"),
how much of a token's oracle set the next token reuses, and perplexity against attention heads kept.

Protocol: the text is cut into windows of ``window`` tokens, each its own forward; every position of
every window is sparsified (stricter than TEAL's and R-Sparse's protocol, which sparsifies only the
last half of each window). A keep of 1.0 is the dense model (every rule keeps everything there).

Cost: about 30 passes over the text (4 rules x 5 keeps, 4 head keeps, and one dense pass that also
measures the cosine and the overlap) and 3 over the calibration text. Full mode (4,096 + 4,096 tokens)
took 648 s on one core of a shared 2-core CPU (about 8 min unloaded); quick mode (512 + 512 tokens,
2 keeps) about 40 s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check, finding
from attnlab.experiments.registry import Result, register
from attnlab.methods.configured import WEIGHTS_AND_ROPE, configured, enter_configured, methods_option
from attnlab.sparsity.configs import UNDER_WHY
from attnlab.sparsity.heads import SparseHeads
from attnlab.sparsity.measure import load_texts, perplexity, sparse_perplexity
from attnlab.sparsity.plots import layer_figure, ppl_figure
from attnlab.sparsity.registry import RULES, RuleInputs, rule_names
from attnlab.sparsity.rules import keep_count
from attnlab.sparsity.similarity import dense_stats

# Every registered rule that a calibration text (or nothing) builds; rules read from a training run's
# files (Deja Vu's predictors) have their own experiment, dejavu.
SWEPT = ("nothing", "calibration")


@dataclass(frozen=True)
class SparsityConfig:
    model: str = "smollm2"
    text: str = "wikitext-2/test.txt"
    calibration: tuple[str, ...] = ("wikitext-2/valid.txt",)  # never the evaluation split
    tokens: int = 4096
    calibration_tokens: int = 4096  # split evenly between the calibration texts
    window: int = 512
    keeps: tuple[float, ...] = (1.0, 0.75, 0.5, 0.35, 0.25, 0.1)
    heads_keeps: tuple[float, ...] = (1.0, 0.75, 0.5, 0.35, 0.25)
    at: float = 0.5  # the keep of the claims, the per-layer profile and the consecutive-token overlap
    # Claims decided by a 2% margin of perplexity; quick mode (a few hundred tokens) reports them as findings.
    close_calls: bool = True
    # claim thresholds, fixed before the first run
    oracle_within: float = 0.02  # oracle top-k at `at`: PPL within 2% of dense (Deja Vu)
    static_vs_oracle: float = 3.0  # static at `at`: PPL increase >= 3x the oracle's ("far worse")
    training_free_loss: float = 0.02  # CATS and TEAL at `at` lose more than 2% at 135M (1-2% reported at 7B)
    cosine: float = 0.9  # consecutive-layer cosine above 0.9 (Deja Vu) ...
    cosine_share: float = 0.5  # ... in at least half of the layers

    methods: tuple[str, ...] = methods_option()  # weights and RoPE methods the rules are measured under

    METHOD_KINDS: ClassVar = WEIGHTS_AND_ROPE
    METHOD_WHY: ClassVar = UNDER_WHY

    def __post_init__(self):
        configured(self)  # an unknown method or option, or a KV method: one line, before the model loads
        for k in (*self.keeps, *self.heads_keeps, self.at):
            keep_count(1, k)  # a keep outside (0, 1]: one line naming the fix
        if self.at not in self.keeps or self.at == 1.0:
            raise ConfigError(f"at={self.at} must be one of keeps={self.keeps} below 1.0")
        if self.window < 2 or self.tokens < 2 or self.calibration_tokens < len(self.calibration) * 2:
            raise ConfigError(f"window={self.window}, tokens={self.tokens}, calibration_tokens="
                              f"{self.calibration_tokens}: need at least 2 tokens each (per calibration text)")


def _ppl(model, ids, cfg, ctx, label: str) -> float:
    with ctx.progress(ids.numel(), label) as bar:
        return perplexity(model, ids, cfg.window, progress=bar)


def _mlp_curves(model, ids, calib, cfg, ctx, dense: float):
    """rule -> {keep: PPL}, rule -> {keep: share of neurons kept on the test text}, and rule -> the
    per-layer profile at ``cfg.at``, for every swept rule; calibration (one pass per statistic) on ``calib``."""
    build = {}
    for name in rule_names(SWEPT):
        kind = RULES.get(name)
        with ctx.progress(calib.numel() if kind.reads == "calibration" else 0, f"calibrate {name}") as bar:
            build[name] = kind.build(model, RuleInputs(calib, cfg.window, bar))
    curves, kept, profiles = {}, {}, {}
    for name in build:
        curves[name], kept[name] = {1.0: dense}, {1.0: 1.0}
        for keep in sorted((k for k in cfg.keeps if k < 1.0), reverse=True):
            with ctx.progress(ids.numel(), f"{name} {keep:g}") as bar:
                curves[name][keep], profile = sparse_perplexity(model, ids, build[name](keep), cfg.window,
                                                                progress=bar)
            kept[name][keep] = profile["overall_kept"]
            if keep == cfg.at:
                profiles[name] = profile
    return curves, kept, profiles


def _head_curve(model, ids, cfg, ctx, dense: float) -> dict[float, float]:
    curve = {1.0: dense}
    for keep in sorted((k for k in cfg.heads_keeps if k < 1.0), reverse=True):
        with SparseHeads(model, keep):
            curve[keep] = _ppl(model, ids, cfg, ctx, f"heads {keep:g}")
    return curve


def _claims(cfg, dense, curves, kept, cos, overlap, heads, n_heads) -> list:
    at = cfg.at
    o, c, t, s = curves["oracle"][at], curves["cats"][at], curves["teal"][at], curves["static"][at]  # the claims' rules
    close = check if cfg.close_calls else (lambda claim, measured, *_: finding(claim, measured))
    between = cos.between
    high = float((between > cfg.cosine).float().mean())
    claims = [
        close(f"oracle top-k at {at:.0%} of MLP neurons stays within {cfg.oracle_within:.0%} of dense PPL "
              f"(PPL / dense - 1; {o:.3f} vs {dense:.3f})", o / dense - 1, 0.0, cfg.oracle_within, "at_most"),
        check(f"a static set at {at:.0%} is far worse: its PPL increase is >= {cfg.static_vs_oracle:g}x the "
              f"oracle's (static {s:.3f}, oracle {o:.3f}, dense {dense:.3f}; the oracle's increase floored at "
              "0.1% of dense)", (s - dense) / max(o - dense, 1e-3 * dense), cfg.static_vs_oracle, 0.0, "at_least"),
        close(f"CATS at {at:.0%} (keeps {kept['cats'][at]:.1%} of neurons on the test text) loses more than "
              f"{cfg.training_free_loss:.0%} at this size (PPL / dense - 1; {c:.3f} vs {dense:.3f})",
              c / dense - 1, cfg.training_free_loss, 0.0, "at_least"),
        close(f"TEAL at {at:.0%} (keeps {kept['teal'][at]:.1%} of h entering down_proj) loses more than "
              f"{cfg.training_free_loss:.0%} at this size (PPL / dense - 1; {t:.3f} vs {dense:.3f})",
              t / dense - 1, cfg.training_free_loss, 0.0, "at_least"),
        check(f"consecutive-layer cosine cos(resid_post_(i-1), resid_post_i) > {cfg.cosine:g} in most layers "
              f"(Deja Vu): share of layers 1..{len(between)} above it", high, cfg.cosine_share, 0.0, "at_least"),
        finding(f"lowest consecutive-layer cosine, at layer {int(between.argmin()) + 1} (across layer 0, embedding "
                f"-> its output: {float(cos.layer[0]):.3f}; across the last layer: {float(cos.layer[-1]):.3f})",
                float(between.min())),
        finding(f"share of a token's oracle set (top {at:.0%} of |h|) that the next token reuses, mean over "
                f"layers (chance: {at:.0%}); lowest layer {float(overlap.min()):.3f}", float(overlap.mean())),
    ]
    if len(heads) > 1:
        ok = [k for k, p in heads.items() if p <= dense * (1 + cfg.oracle_within)]
        claims.append(finding(f"fewest attention heads kept per token within {cfg.oracle_within:.0%} of dense PPL, "
                              f"as a share of the {n_heads} heads (1: none can go; PPL at the smallest keep "
                              f"{min(heads):g}: {heads[min(heads)]:.3f})", min(ok)))
    return claims


def _summary(cfg, dense, curves, kept, heads, cos, overlap) -> str:
    rules = "; ".join(f"{r}: " + ", ".join(f"{k:g} {p:.3f}" for k, p in sorted(c.items(), reverse=True) if k < 1)
                      for r, c in curves.items())
    head = ", ".join(f"{k:g} {p:.3f}" for k, p in sorted(heads.items(), reverse=True) if k < 1)
    return (f"{cfg.model} on {cfg.tokens} tokens of {cfg.text} in windows of {cfg.window} (every position "
            f"sparsified), calibrated on {cfg.calibration_tokens} tokens of {', '.join(cfg.calibration)}. Dense PPL "
            f"{dense:.3f}. PPL by share of MLP neurons kept -- {rules}. Neurons CATS / TEAL kept on the test text "
            f"at {cfg.at:g}: {kept['cats'][cfg.at]:.3f} / {kept['teal'][cfg.at]:.3f}. PPL by share of heads kept: "
            f"{head or 'not measured'}. Residual cosine across layers: mean {float(cos.layer.mean()):.3f} (min "
            f"{float(cos.layer.min()):.3f}); consecutive-token reuse of the oracle set at {cfg.at:g}: mean "
            f"{float(overlap.mean()):.3f}.")


@register("contextual-sparsity", "Deja Vu / CATS / TEAL: PPL vs MLP neurons and heads kept per token, static "
          "vs contextual, cross-layer cosine, on a real model", SparsityConfig,
          quick={"tokens": 512, "calibration_tokens": 512, "window": 256, "keeps": (1.0, 0.5, 0.25),
                 "heads_keeps": (1.0, 0.5), "close_calls": False})
def run_contextual_sparsity(cfg: SparsityConfig, ctx) -> Result:
    model, ids, calib = load_texts(cfg.model, cfg.text, cfg.tokens, cfg.calibration, cfg.calibration_tokens,
                                   ctx.device)
    enter_configured(cfg, model, None, ctx)  # the rules are calibrated on, and measure, the model the methods leave
    with ctx.progress(ids.numel(), "dense, cosine, overlap") as bar:
        dense, cos, overlaps = dense_stats(model, ids, (cfg.at,), cfg.window, bar)
    overlap = overlaps[cfg.at]
    curves, kept, profiles = _mlp_curves(model, ids, calib, cfg, ctx, dense)
    heads = _head_curve(model, ids, cfg, ctx, dense)
    n_heads = model.config.num_attention_heads
    claims = _claims(cfg, dense, curves, kept, cos, overlap, heads, n_heads)
    ppl_figure(ctx, curves, heads if len(heads) > 1 else {}, dense)
    layer_figure(ctx, profiles, cfg.at, cos.layer.tolist(), overlap.tolist())
    metrics = {"dense_ppl": dense,
               "ppl": {r: {f"{k:g}": p for k, p in sorted(c.items(), reverse=True)} for r, c in curves.items()},
               "kept": {r: {f"{k:g}": v for k, v in sorted(c.items(), reverse=True)} for r, c in kept.items()},
               "heads_ppl": {f"{k:g}": p for k, p in sorted(heads.items(), reverse=True)},
               "heads_kept": {f"{k:g}": keep_count(n_heads, k) for k in sorted(heads, reverse=True)},
               "profile_at": cfg.at, "profile": profiles,
               "cosine_per_layer": cos.layer.tolist(), "overlap_per_layer": overlap.tolist()}
    figures = {"sparsity_ppl.png": "Perplexity against the share of MLP neurons kept per token, one line per rule "
               "(left), and against the share of attention heads kept (right); dotted: dense, dashed: dense + 2%.",
               "sparsity_layers.png": f"Per layer at keep {cfg.at:g}: neurons kept and |h| mass captured per rule; "
               "cosine of the residual stream across the layer; share of a token's oracle set the next reuses."}
    return Result(claims, metrics, figures, _summary(cfg, dense, curves, kept, heads, cos, overlap))
