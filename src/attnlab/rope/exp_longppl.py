"""``attnlab longppl`` as a registered experiment: sliding-window perplexity of a text at several context
lengths, one curve per RoPE scaling. No claims: it measures (``rope-zero-shot`` runs the same evaluation
beside the passkey grid, with claims)."""
from __future__ import annotations

from attnlab.experiments.registry import Result, register
from attnlab.rope.configs import LongPPLRun

TALK_ORDER = 1  # after passkey, rope-zero-shot (experiments) and pi-finetune (exp_pi_finetune, 0)


@register("longppl", "sliding-window perplexity at several context lengths under RoPE scalings, on a real model",
          LongPPLRun, demo=False)
def run_longppl(cfg: LongPPLRun, ctx) -> Result:
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.methods import Context, apply
    from attnlab.rope.compare import longppl_by_scaling, scaled
    from attnlab.rope.plots import longppl_figure

    model, tok = load_model(cfg.model, ctx.device)
    scalings = cfg.scalings_applied()
    scaled(model, scalings)  # a model without (plain) RoPE is refused before its text is read
    trained = model.config.max_position_embeddings
    ids = text_ids(tok, cfg.text, cfg.tokens or 2 * max(cfg.lengths), fix="--text PATH")
    with apply(model, *cfg.methods_applied(), ctx=Context(tok, ctx.device, None, cfg.model)):  # every curve's
        curves = longppl_by_scaling(model, ids, scalings, list(cfg.lengths), cfg.stride, cfg.windows, ctx)
    longppl_figure(ctx, curves, trained)
    ppl = {k: {str(n): c.ppl(n) for n in c.lengths} for k, c in curves.items()}
    metrics = {"command": ctx.command, "model": cfg.model, "trained_context": trained, "factor": cfg.factor,
               "methods": [m.spec() for m in cfg.methods_applied()], "ppl": ppl}
    summary = "\n".join(f"- {name}: PPL " + ", ".join(f"{n}: {p:.2f}" for n, p in v.items()) for name, v in ppl.items())
    return Result([], metrics, {"longppl.png": f"sliding-window PPL (stride {cfg.stride}) against context length, "
                                "one curve per scaling"}, summary)
