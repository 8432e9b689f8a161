"""``attnlab reproduce accuracy-table``: the seeds' zero-shot tables (H2O's, Deja Vu's) in miniature on one model.

Rows: dense; each KV policy (H2O heavy + recent, sinks + window) at each budget, the context streamed
through it so that it evicts; each contextual-sparsity rule (Deja Vu's predictors, CATS, the oracle, a
static set) at one keep. Columns: the tasks, with standard errors, and their average. The claims, fixed
from the seeds before the first run, compare a row's average with dense's over the tasks where dense is
above chance by more than two standard errors (at 135M, COPA and Winogrande may not be: the table says
which were left out). Both rows answer the same items, so each comparison carries a paired bootstrap
interval over them (``accuracy/paired.py``), which decides it: a claim whose interval straddles its bound is
unresolved, its note saying about how many items would settle it.
"""
from __future__ import annotations

from attnlab.accuracy.configs import AccuracyTable, EvalRun
from attnlab.core.errors import UsageError
from attnlab.experiments.claims import finding
from attnlab.experiments.registry import Result, register

TALK_ORDER = 1


def _average(result: dict, tasks: list[str]) -> float:
    return sum(result["tasks"][t]["acc"] for t in tasks) / len(tasks) if tasks else float("nan")


def claims(table: dict[str, dict], dense: str, cfg: AccuracyTable) -> list:
    """The seeds' claims on the rows measured (a row that could not run is a finding saying why); each comparison
    with its paired interval over the compared tasks' items (``paired``), which decides it."""
    from attnlab.accuracy.paired import paired, paired_check
    from attnlab.accuracy.run import above_chance

    compared = [t for t in cfg.tasks if above_chance(table[dense]["tasks"][t])]
    left_out = [t for t in cfg.tasks if t not in compared]
    note = f"over {', '.join(compared)}" + (f" ({', '.join(left_out)} left out: dense within 2 standard errors of "
                                            "chance)" if left_out else "")
    base = _average(table[dense], compared)

    ran = {row for row, result in table.items() if "tasks" in result}  # a row that could not run: a finding below

    def drop(row: str) -> float:
        return base - _average(table[row], compared)

    def pair(a: str, b: str):  # no task compared: no items, no interval (the claim's NaN fails)
        return paired(table, a, b, compared, cfg.seed) if compared else None

    out = [finding(f"dense average accuracy {note}", base)]
    h2o20 = next((r for r in ran if r.startswith("h2o 20%")), None)
    if h2o20:
        out.append(paired_check(f"H2O at 20% of the context within 1 point of dense on average (H2O's table): dense - "
                                f"{h2o20} {note}", drop(h2o20), 0.01, 1e-9, "at_most", pair(dense, h2o20)))
    keep = f"keep {cfg.keep:g}"
    for rule, seed in (("oracle", "the oracle's sets, whose PPL rises <= 2% at this keep (contextual-sparsity)"),
                       ("predicted", "Deja Vu's predictors (lookahead)")):
        row = f"{rule} {keep}"
        if row in ran:
            out.append(paired_check(f"{seed} at {keep} within 1 point of dense on average (Deja Vu's table): dense - "
                                    f"{row} {note}", drop(row), 0.01, 1e-9, "at_most", pair(dense, row)))
    static, oracle = f"static {keep}", f"oracle {keep}"
    if {static, oracle} <= ran:  # static's drop minus the oracle's = avg(oracle) - avg(static)
        out.append(paired_check(f"a static set is clearly worse than contextual sparsity: static's drop minus the "
                                f"oracle's at {keep}, in points {note}", drop(static) - drop(oracle), 0.02, 0,
                                "at_least", pair(oracle, static)))
    for row, result in table.items():
        out.append(finding(f"{row}: average accuracy {note}", _average(result, compared)) if "tasks" in result
                   else finding(f"{row}: not run ({result['skipped']})", float("nan")))
        evicted = [r["evicted"] for r in result.get("tasks", {}).values() if r.get("evicted") is not None]
        if evicted:
            out.append(finding(f"{row}: share of the context evicted, mean over tasks", sum(evicted) / len(evicted)))
    return out


@register("accuracy-table", "the seeds' zero-shot accuracy tables in miniature: dense, H2O and sinks at 20%/50% "
          "budgets, Deja Vu / CATS / oracle / static sparsity at keep 50%, through lm-evaluation-harness",
          AccuracyTable, quick={"tasks": ("copa", "piqa"), "limit": 20, "policies": ("h2o",), "budgets": (0.2,),
                                "rules": ("oracle", "static")})  # the rows the three claims compare, no more
def run_accuracy_table(cfg: AccuracyTable, ctx) -> Result:
    from attnlab.accuracy.plots import budget_figure
    from attnlab.accuracy.run import request_count
    from attnlab.evals.inputs import load_model

    rows = cfg.rows()
    total = request_count(rows[0])  # bad task files and impossible shots: refused before the model loads
    model, tok = load_model(cfg.model, ctx.device)
    named = {cfg.name(row): row for row in rows}  # "dense", "h2o 20%", ...: the methods under every row left out
    table: dict[str, dict] = {}
    for name, row in named.items():
        with ctx.progress(total, row.method()) as bar:
            table[name] = _run_row(row, model, tok, ctx.device, bar)
    dense = next(iter(named))
    ran = {name: row for name, row in named.items() if "tasks" in table[name]}
    curves = {p: {float(kv.budget): _average(table[name], list(cfg.tasks)) for name, row in ran.items()
                  if (kv := row.kv_method()) is not None and kv.name == p} for p in cfg.policies}
    points = {name: _average(table[name], list(cfg.tasks)) for name, row in ran.items() if _sparse(row)}
    budget_figure(ctx, _average(table[dense], list(cfg.tasks)), curves, points)
    metrics = {"command": ctx.command, "model": cfg.model, "tasks": list(cfg.tasks), "rows": table}
    summary = "\n".join(table_lines(table, list(cfg.tasks)))
    if cfg.methods:  # the rows' names leave them out: say what every row ran under
        metrics["under_every_row"] = list(cfg.methods)
        summary = f"Every row under {rows[0].method()}.\n\n" + summary
    return Result(claims(table, dense, cfg), metrics, {"accuracy_vs_budget.png": "Average accuracy over the tasks "
                  "against the KV budget, per policy; the sparsity rules at their keep; dense dotted."}, summary)


def _sparse(row: EvalRun) -> bool:
    return any(m.kind == "mlp" for m in row.methods_applied())


def _run_row(row: EvalRun, model, tok, device: str, progress) -> dict:
    """One row's result; a rule that cannot be built here (no saved predictors) is recorded, not fatal."""
    from attnlab.accuracy.run import evaluate

    try:
        return evaluate(row, model, tok, device, progress)
    except UsageError as e:  # MissingResource too: e.g. Deja Vu's predictors not trained for this model
        if not _sparse(row):
            raise
        return {"method": row.method(), "skipped": str(e)}


def table_lines(table: dict[str, dict], tasks: list[str]) -> list[str]:
    """The table as Markdown lines (the summary shows it): acc ± standard error per task, and the average."""
    lines = ["| method | " + " | ".join(tasks) + " | average | items/s |", "|---|" + "---|" * (len(tasks) + 2)]
    for name, r in table.items():
        if "tasks" not in r:
            lines.append(f"| {name} | " + " | ".join("—" for _ in tasks) + f" | not run: {r['skipped']} | |")
            continue
        cells = [f"{r['tasks'][t]['acc']:.3f} ± {r['tasks'][t]['acc_stderr'] or 0:.3f}" for t in tasks]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_average(r, tasks):.3f} | {r['items_per_s']:.2f} |")
    return lines
