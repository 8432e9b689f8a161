"""``attnlab sink-table`` as a registered experiment: one model streamed token by token through caches
n + (W - n) (:mod:`attnlab.sinks.table`), the perplexity of each beside the published 160M numbers. No
claims: it measures."""
from __future__ import annotations

from attnlab.experiments.registry import Result, register
from attnlab.sinks.configs import SinkTableRun

TALK_ORDER = 2  # after sink-pretraining (0) and sink-emergence (1)


@register("sink-table", "StreamingLLM's sink table for one model: streaming PPL through caches n+(W-n)", SinkTableRun,
          demo=False)
def run_table(cfg: SinkTableRun, ctx) -> Result:
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.methods.configured import enter_configured
    from attnlab.sinks.plots import table_figure
    from attnlab.sinks.table import PUBLISHED, label, ppl, sink_table

    model, tok = load_model(cfg.model, ctx.device)
    methods = enter_configured(cfg, model, tok, ctx)  # every cache below streams the model as they leave it
    ids = text_ids(tok, cfg.text, cfg.tokens, "--text PATH")  # sink_table puts a sink token first itself
    with ctx.progress(len(cfg.sinks) * (ids.numel() - 1), "stream") as bar:
        nll = sink_table(model, ids, cfg.window, cfg.sinks, bar)
    row = {n: ppl(x) for n, x in nll.items()}
    ctx.savefig(table_figure({cfg.model: row}, cfg.window, PUBLISHED), "sink_table.png")
    metrics = {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
               "window": cfg.window, "methods": [m.spec() for m in methods],
               "ppl": {label(n, cfg.window): p for n, p in row.items()}}
    summary = "\n".join(f"- {label(n, cfg.window)}: PPL {p:.3f}" for n, p in row.items())
    return Result([], metrics, {"sink_table.png": "Streaming PPL through each cache n+(W-n), beside the published "
                                                  "160M pre-training table"}, summary)
