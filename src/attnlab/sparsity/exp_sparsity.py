"""``attnlab sparsity`` as a registered experiment: a model measured with one rule at one keep fraction --
perplexity dense vs sparse, the per-layer profile of what the rule kept, the residual stream's cosine
across layers, the reuse of a token's oracle set by the next token and, on request, decode speed.
No claims: it measures."""
from __future__ import annotations

from attnlab.experiments.registry import Result, register
from attnlab.sparsity.configs import SparsityRun
from attnlab.sparsity.registry import RULES, RuleInputs


def _rule(cfg: SparsityRun, model, calib, ctx):
    """The rule at ``cfg.keep``, built as the registry says: calibrated on ``calib``, or read from the
    saved predictors the config names."""
    with ctx.progress(0 if calib is None else calib.numel(), f"build {cfg.rule}") as bar:
        inputs = RuleInputs(calib, cfg.window, bar, cfg.model, cfg.predictors, cfg.predictor_source,
                            cfg.predictor_rank)
        return RULES.get(cfg.rule).build(model, inputs)(cfg.keep)


@register("sparsity", "contextual sparsity of a model's MLP (and heads) at one keep fraction, with one rule",
          SparsityRun, demo=False)
def run_sparsity(cfg: SparsityRun, ctx) -> Result:
    """Dense vs sparse perplexity, the sparse run's per-layer profile, cosine, token overlap (and speed)."""
    from attnlab.methods.configured import enter_configured
    from attnlab.sparsity.measure import load_texts
    from attnlab.sparsity.summary import result_lines

    kind = RULES.get(cfg.rule)
    calibration = (cfg.calibration,) if kind.reads == "calibration" else ()
    model, ids, calib = load_texts(cfg.model, cfg.text, cfg.tokens, calibration, cfg.calibration_tokens,
                                   ctx.device, "--text PATH", "--calibration PATH")
    # the rule is calibrated on, and measures, the weights (and positions) the methods leave the model with
    methods = enter_configured(cfg, model, None, ctx)
    metrics = _measure(cfg, ctx, model, ids, calib) | {"methods": [m.spec() for m in methods]}
    summary = "\n".join(f"- {line}" for line in result_lines(metrics))
    return Result([], metrics, {"sparsity.png": f"Per layer: neurons {cfg.rule} kept and the share of |h| mass "
                                "they carry; cosine of the residual stream across the layer; share of a token's "
                                f"oracle set (top {cfg.keep:g} of |h|) that the next token reuses."}, summary)


def _measure(cfg: SparsityRun, ctx, model, ids, calib) -> dict:
    from attnlab.models import arch
    from attnlab.sparsity.measure import sparse_perplexity
    from attnlab.sparsity.plots import layer_figure
    from attnlab.sparsity.similarity import dense_stats

    rule = _rule(cfg, model, calib, ctx)  # saved predictors that do not fit: refused before the dense pass
    with ctx.progress(ids.numel(), "dense, cosine, overlap") as bar:
        dense, cos, overlaps = dense_stats(model, ids, (cfg.keep,), cfg.window, bar)
    overlap = overlaps[cfg.keep]
    with ctx.progress(ids.numel(), cfg.rule) as bar:
        sparse, profile = sparse_perplexity(model, ids, rule, cfg.window, cfg.heads_keep, bar)
    layer_figure(ctx, {cfg.rule: profile}, cfg.keep, cos.layer.tolist(), overlap.tolist(), "sparsity.png")
    metrics = {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
               "rule": cfg.rule, "keep": cfg.keep, "heads_keep": cfg.heads_keep,
               "dense_ppl": dense, "sparse_ppl": sparse, "ppl_increase": sparse / dense - 1, "profile": profile,
               "cosine_per_layer": cos.layer.tolist(), "overlap_per_layer": overlap.tolist()}
    if cfg.speed:
        from attnlab.sparsity.speed import decode_speed

        with ctx.progress(2, "decode speed") as bar:
            metrics["decode"] = decode_speed(model, ids[:cfg.window], rule, cfg.speed_steps)
            bar.update(2)
    if RULES.get(cfg.rule).reads == "predictors":
        metrics["predictors"] = rule.report(arch.mlp(model, 0).gate_proj is not None)
    return metrics
