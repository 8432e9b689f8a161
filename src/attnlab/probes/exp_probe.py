"""``attnlab probe`` as a registered experiment: a text streamed once through a model with the chosen probes
(:mod:`attnlab.probes.run`); what each measured, the papers' claims it checks, and its figures."""
from __future__ import annotations

from attnlab.experiments.registry import Result, register
from attnlab.probes.configs import ProbeRun


@register("probe", "the chosen probes on a model and a text: sinks, heavy hitters, ...", ProbeRun, demo=False)
def run_probe(cfg: ProbeRun, ctx) -> Result:
    """Load the model and text, stream them once with the chosen probes."""
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.methods.configured import enter_configured
    from attnlab.probes.run import claim_lines, probe_options, run_probes
    from attnlab.view.build import write_view

    model, tok = load_model(cfg.model, ctx.device)
    methods = enter_configured(cfg, model, tok, ctx)  # the probes read the model as they leave it
    ids = text_ids(tok, cfg.text, cfg.tokens, "--text PATH")
    metrics, claims, figures = run_probes(model, ids, cfg.probes, cfg.chunk, ctx, tok.decode,
                                          options=probe_options(cfg.options, cfg.probes))
    links = write_view(model, tok, ids, ctx.out, {"model": cfg.model, "text": cfg.text}, cfg.view, ctx.progress)
    lines = claim_lines(claims) or ["no probe chosen makes a claim: see metrics.json"]
    summary = (f"{cfg.model} on the first {ids.numel()} tokens of {cfg.text} in chunks of {cfg.chunk} with the "
               f"model's KV cache (full causal attention over the prefix); probes: {', '.join(cfg.probes)}.\n"
               + "\n".join(f"- {line}" for line in lines))
    return Result(claims, {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
                           "chunk": cfg.chunk, "probes": list(cfg.probes), "methods": [m.spec() for m in methods],
                           **metrics}, figures, summary, links)
