"""Human-readable reports: ``report.md`` per experiment, ``index.html`` for the demo."""
from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnlab.experiments.registry import Experiment, Result


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def claims_markdown(claims) -> str:
    rows = ["| | claim | measured | expected | tolerance | test |", "|---|---|---|---|---|---|"]
    for c in claims:
        mark = "✓" if c.holds else "✗"
        rows.append(f"| {mark} | {c.claim} | {_fmt(c.measured)} | {_fmt(c.expected)} | {_fmt(c.tolerance)} | {c.test} |")
    return "\n".join(rows)


def experiment_report(exp: "Experiment", result: "Result", config: dict, seconds: float, command: str) -> str:
    held = sum(c.holds for c in result.claims)
    parts = [
        f"# {exp.name}",
        "",
        exp.summary,
        "",
        f"Command: `{command}`  ",
        f"Wall time: {seconds:.1f} s. Claims holding: {held}/{len(result.claims)}.",
        "",
    ]
    if result.summary:
        parts += [result.summary, ""]
    parts += ["## Claims", "", claims_markdown(result.claims), ""]
    if result.figures:
        parts += ["## Figures", ""]
        for name, caption in result.figures.items():
            parts += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    parts += ["## Config", "", "```json", _json(config), "```", ""]
    return "\n".join(parts)


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2)


def demo_index_html(sections: list[tuple[str, "Experiment", "Result"]], seconds: float) -> str:
    """One page: every figure and every claim (✓/✗) of every experiment the demo ran.

    sections: (relative folder, experiment, result) per experiment.
    """
    total = sum(len(r.claims) for _, _, r in sections)
    held = sum(c.holds for _, _, r in sections for c in r.claims)
    out = [
        "<!doctype html><html><head><meta charset='utf-8'><title>attnlab demo</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        ".ok{color:#080;font-weight:bold}.bad{color:#c00;font-weight:bold}img{max-width:100%;border:1px solid #eee}"
        "</style></head><body>",
        "<h1>attnlab demo</h1>",
        f"<p>{held}/{total} claims hold; {len(sections)} experiments in {seconds:.0f} s. "
        "Each experiment's folder holds its config.json, metrics.json and report.md.</p>",
    ]
    for folder, exp, result in sections:
        e = html.escape
        out.append(f"<h2 id='{e(exp.name)}'>{e(exp.name)}</h2><p>{e(exp.summary)} "
                   f"(<a href='{e(folder)}/report.md'>report</a>, <a href='{e(folder)}/metrics.json'>metrics</a>)</p>")
        if result.summary:
            out.append(f"<p>{e(result.summary)}</p>")
        out.append("<table><tr><th></th><th>claim</th><th>measured</th><th>expected</th><th>tolerance</th><th>test</th></tr>")
        for c in result.claims:
            mark = "<span class='ok'>✓</span>" if c.holds else "<span class='bad'>✗</span>"
            out.append(f"<tr><td>{mark}</td><td>{e(c.claim)}</td><td>{_fmt(c.measured)}</td>"
                       f"<td>{_fmt(c.expected)}</td><td>{_fmt(c.tolerance)}</td><td>{e(c.test)}</td></tr>")
        out.append("</table>")
        for name, caption in result.figures.items():
            out.append(f"<figure><img src='{e(folder)}/{e(name)}' alt='{e(caption)}'><figcaption>{e(caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def demo_report_md(sections: list[tuple[str, "Experiment", "Result"]], seconds: float) -> str:
    parts = ["# attnlab demo", "", f"Ran {len(sections)} experiments in {seconds:.0f} s. "
             "Open `index.html` for every figure and claim on one page.", ""]
    for folder, exp, result in sections:
        parts += [f"## [{exp.name}]({folder}/report.md)", "", exp.summary, "", claims_markdown(result.claims), ""]
    return "\n".join(parts)
