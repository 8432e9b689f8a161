"""``attnlab eval`` as a registered experiment: one model's accuracy on the chosen tasks, methods applied,
through lm-evaluation-harness. No claims: it measures (the accuracy table states the seeds' claims)."""
from __future__ import annotations

from attnlab.accuracy.configs import EvalRun
from attnlab.experiments.registry import Result, register


def result_lines(result: dict) -> list[str]:
    """One line per task and the average, as the summary and report print them."""
    lines = []
    for name, r in result["tasks"].items():
        err = f" ± {r['acc_stderr']:.3f}" if r.get("acc_stderr") is not None else ""
        extra = [f"acc_norm {r['acc_norm']:.3f}"] if "acc_norm" in r else []
        extra += [f"chance {r['chance']:.2f}"] if r.get("chance") is not None else []
        extra += [f"{r['evicted']:.0%} of the context evicted"] if r.get("evicted") is not None else []
        lines.append(f"{name}: acc {r['acc']:.3f}{err} on {r['items']} items" + (f" ({', '.join(extra)})"
                                                                                   if extra else ""))
    lines.append(f"average acc {result['average_acc']:.3f} ({result['method']}, {result['shots']}-shot; "
                 f"{result['items_per_s']:.2f} items/s)")
    return lines


@register("eval", "zero-/few-shot accuracy (COPA, PIQA, ARC, ...) of a model with methods applied, through "
          "lm-evaluation-harness", EvalRun, demo=False)
def run_eval(cfg: EvalRun, ctx) -> Result:
    from attnlab.accuracy.plots import task_bars
    from attnlab.accuracy.run import evaluate, request_count
    from attnlab.evals.inputs import load_model

    total = request_count(cfg)  # bad task files and impossible shots: refused before the model loads
    model, tok = load_model(cfg.model, ctx.device)
    with ctx.progress(total, f"eval {cfg.method()}") as bar:
        result = evaluate(cfg, model, tok, ctx.device, bar)
    task_bars(ctx, result)
    metrics = {"command": ctx.command, "model": cfg.model, **result}
    summary = "\n".join(f"- {line}" for line in result_lines(result))
    return Result([], metrics, {"accuracy.png": "Accuracy per task with its standard error; dashed: chance."},
                  summary)
