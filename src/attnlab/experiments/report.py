"""Human-readable reports: ``report.md`` per experiment; the demo's ``report.md`` and ``index.html``."""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING, Any

from attnlab.experiments.claims import STATUSES, describe, tally

if TYPE_CHECKING:
    from attnlab.experiments.registry import Experiment, Result

MARK = {"holds": "✓", "fails": "✗", "unresolved": "unresolved", "erratum": "erratum", "finding": "finding"}  # status
COUNTED = STATUSES  # the summary tables' count columns, in order, and their heads
HEADS = tuple({"holds": "hold", "fails": "fail", "erratum": "errata", "finding": "findings"}.get(s, s) for s in COUNTED)
NONE = "—"  # a finding has no expected value, tolerance or test


@dataclass
class DemoRun:
    """One experiment as the demo ran it: its folder (relative to the demo's) and wall time."""

    name: str
    summary: str  # the experiment's one line
    part: str  # the part of the talk it belongs to
    folder: str
    result: "Result"
    seconds: float


@dataclass
class Skipped:
    """An experiment the demo could not run here, and why (a missing corpus or model)."""

    name: str
    part: str
    reason: str


def _fmt(x: Any) -> str:
    if x is None:
        return NONE
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _measured(c) -> str:
    """The measured value, and its interval and n where the claim carries them: '0.0175 [-0.01, 0.045], n=400'."""
    if c.interval is None:
        return _fmt(c.measured)
    lo, hi = c.interval
    return f"{_fmt(c.measured)} [{_fmt(lo)}, {_fmt(hi)}], n={c.n}"


WHY = {"fails": "why it fails", "unresolved": "why unresolved"}


def _asides(c) -> list[tuple[str, str]]:
    """What a reader needs beside a claim: (label, text) for an erratum's correction, any note, and how its
    interval was obtained."""
    out = []
    if c.corrected:
        out.append(("corrected", c.corrected))
    if c.note:
        out.append((WHY.get(c.status, "note"), c.note))
    if c.method:
        out.append(("interval", c.method))
    return out


# --------------------------------------------------------------------------- markdown
def _cell(text: Any) -> str:
    """A markdown table cell: '|' would end the cell (claims write |Δ|)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_markdown(claims) -> str:
    """The claims table; a 'note' column appears when a claim carries a note or a correction."""
    noted = any(_asides(c) for c in claims)
    head = ["", "claim", "measured", "expected", "tolerance", "test"] + (["note"] if noted else [])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in claims:
        cells = [MARK[c.status], c.claim, _measured(c), _fmt(c.expected), _fmt(c.tolerance), _fmt(c.test)]
        if noted:
            cells.append("; ".join(f"{label}: {text}" for label, text in _asides(c)))
        rows.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return "\n".join(rows)


def experiment_report(exp: "Experiment", result: "Result", config: dict, seconds: float, command: str,
                      machine: str = "") -> str:
    where = f" on {machine}" if machine else ""
    parts = [
        f"# {exp.name}",
        "",
        exp.summary,
        "",
        f"Command: `{command}`  ",
        f"Wall time: {seconds:.1f} s{where}." + (f" {describe(tally(result.claims))}." if result.claims else
                                                 " A measurement run: no claims (the numbers are in metrics.json)."),
        "",
    ]
    if result.summary:
        parts += [result.summary, ""]
    if result.links:
        parts += [" · ".join(f"[{label}]({name})" for name, label in result.links.items()), ""]
    if result.claims:
        parts += ["## Claims", "", claims_markdown(result.claims), ""]
    if result.figures:
        parts += ["## Figures", ""]
        for name, caption in result.figures.items():
            parts += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    parts += ["## Config", "", "```json", json.dumps(config, indent=2), "```", ""]
    return "\n".join(parts)


def _all_claims(runs: list[DemoRun]) -> list:
    return [c for r in runs for c in r.result.claims]


def decided_line(runs: list[DemoRun]) -> str:
    """Whether every experiment decided a claim (it held, failed, or was an erratum), else which did not."""
    none = [r.name for r in runs if not any(c.status in ("holds", "fails", "erratum") for c in r.result.claims)]
    return ("Every experiment decided at least one claim." if not none else
            f"No claim decided in {len(none)} of {len(runs)} experiments: {', '.join(none)}.")


def demo_report_md(runs: list[DemoRun], skipped: list[Skipped], seconds: float, settings: str) -> str:
    """The demo as markdown: the summary table, then each part of the talk with its claims."""
    parts = ["# attnlab demo", "",
             f"{describe(tally(_all_claims(runs)))}: {len(runs)} experiments in {seconds:.0f} s ({settings}). "
             f"{decided_line(runs)} Open `index.html` for every figure and claim on one page.", "",
             "| experiment | part of the talk | " + " | ".join(HEADS) + " | wall time |",
             "|---|---|" + "---|" * len(HEADS) + "---|"]
    for r in runs:
        n = tally(r.result.claims)
        parts.append(f"| [{r.name}]({r.folder}/report.md) | {_cell(r.part)} | "
                     + " | ".join(str(n[k]) for k in COUNTED) + f" | {r.seconds:.1f} s |")
    parts.append("")
    if skipped:
        parts += ["Not run here:", ""] + [f"- {s.name}: skipped ({s.reason})" for s in skipped] + [""]
    for part, group in groupby(runs, key=lambda r: r.part):
        parts += [f"## {part}", ""]
        for r in group:
            parts += [f"### [{r.name}]({r.folder}/report.md)", "", r.summary, "",
                      f"{describe(tally(r.result.claims))}; {r.seconds:.1f} s.", "",
                      claims_markdown(r.result.claims), ""]
    return "\n".join(parts)


# --------------------------------------------------------------------------- html
CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d8dee4;--head:#f6f8fa;--link:#0b5cad;
--ok:#1a7f37;--bad:#c62828;--bad-bg:#fdeeee;--warn:#8a5300;--warn-bg:#fff5e0;--info:#3d5a80;--info-bg:#eaf0f7;
--open:#6a3d9a;--open-bg:#f4eefb}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:2rem 1.5rem 5rem}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:2rem;margin:0 0 .3rem}
.lead{font-size:1.15rem;margin:.2rem 0 .6rem}
.muted,.legend,figcaption,.meta{color:var(--muted)}
.legend,.meta{font-size:.92rem}
h2{font-size:1.55rem;margin:3.2rem 0 .8rem;padding-bottom:.35rem;border-bottom:3px solid var(--fg)}
h2.first{margin-top:2rem}
h3{font-size:1.25rem;margin:2.6rem 0 .2rem}
section.experiment{border-top:1px solid var(--line);margin-top:2rem}
section.experiment:first-of-type{border-top:0;margin-top:0}
.scroll{overflow-x:auto;margin:1rem 0}  /* a narrow window scrolls a table rather than clipping it */
table{border-collapse:collapse;width:100%;font-size:.93rem}
th,td{padding:.42rem .6rem;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
thead th{background:var(--head);font-weight:600;border-bottom:2px solid var(--line);white-space:nowrap}
tfoot td{font-weight:600;border-top:2px solid var(--line);border-bottom:0}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.zero{color:#aab2bb}
td.name{white-space:nowrap}
td.status{white-space:nowrap;text-align:center;width:5.5em}
.ok{color:var(--ok);font-weight:700;font-size:1.1em}.bad{color:var(--bad);font-weight:700;font-size:1.1em}
td.fails-count{color:var(--bad);font-weight:700}
.badge{display:inline-block;padding:.05em .5em;border-radius:1em;font-size:.78rem;font-weight:600}
.badge.erratum{background:var(--warn-bg);color:var(--warn);border:1px solid #f0c36d}
.badge.finding{background:var(--info-bg);color:var(--info);border:1px solid #b6c8dd}
.badge.unresolved{background:var(--open-bg);color:var(--open);border:1px solid #c9b3e6}
tr.fails>td{background:var(--bad-bg)}
tr.erratum>td{background:var(--warn-bg)}
tr.unresolved>td{background:var(--open-bg)}
td.unresolved-count{color:var(--open);font-weight:700}
.aside{margin-top:.35rem;font-size:.9rem;padding-left:.6rem;border-left:3px solid var(--line)}
tr.fails .aside{border-left-color:var(--bad)}tr.erratum .aside{border-left-color:#e0a030}
tr.unresolved .aside{border-left-color:var(--open)}
.aside b{font-weight:600}
.run-summary{max-width:80ch}
.figures{display:flex;flex-wrap:wrap;gap:1.2rem 2rem;align-items:flex-start;margin:1.2rem 0}
figure{margin:0;flex:0 1 auto;max-width:100%}
figure img{display:block;max-width:100%;height:auto;border:1px solid var(--line);border-radius:4px}
figcaption{font-size:.9rem;margin-top:.4rem;width:0;min-width:100%}  /* as wide as its image, never wider */
ul.skipped li{margin:.2rem 0}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _slug(text: str) -> str:
    return "part-" + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "other")


def _count_cells(counts: dict[str, int]) -> str:
    cells = []
    for key in COUNTED:
        cls = "num zero" if counts[key] == 0 else (f"num {key}-count" if key in ("fails", "unresolved") else "num")
        cells.append(f"<td class='{cls}'>{counts[key]}</td>")
    return "".join(cells)


def _summary_table(runs: list[DemoRun], seconds: float) -> str:
    out = ["<div class='scroll'><table class='summary'><thead><tr><th>experiment</th><th>part of the talk</th>"
           + "".join(f"<th class='num'>{h}</th>" for h in HEADS) + "<th class='num'>wall time</th><th>report</th>"
           "</tr></thead><tbody>"]
    for r in runs:
        out.append(f"<tr><td class='name'><a href='#{_e(r.name)}'>{_e(r.name)}</a></td><td>{_e(r.part)}</td>"
                   f"{_count_cells(tally(r.result.claims))}<td class='num'>{r.seconds:.1f} s</td>"
                   f"<td><a href='{_e(r.folder)}/report.md'>report.md</a></td></tr>")
    out.append(f"</tbody><tfoot><tr><td>all {len(runs)}</td><td></td>{_count_cells(tally(_all_claims(runs)))}"
               f"<td class='num'>{seconds:.0f} s</td><td></td></tr></tfoot></table></div>")
    return "\n".join(out)


def _claim_row(c) -> str:
    if c.status in ("holds", "fails"):
        mark = f"<span class='{'ok' if c.status == 'holds' else 'bad'}' title='{c.status}'>{MARK[c.status]}</span>"
    else:
        mark = f"<span class='badge {c.status}'>{MARK[c.status]}</span>"
    asides = "".join(f"<div class='aside'><b>{_e(label)}:</b> {_e(text)}</div>"
                     for label, text in _asides(c))
    return (f"<tr class='{c.status}'><td class='status'>{mark}</td><td class='claim'>{_e(c.claim)}{asides}</td>"
            f"<td class='num'>{_e(_measured(c))}</td><td class='num'>{_e(_fmt(c.expected))}</td>"
            f"<td class='num'>{_e(_fmt(c.tolerance))}</td><td>{_e(_fmt(c.test))}</td></tr>")


def _experiment_section(r: DemoRun) -> str:
    folder = _e(r.folder)
    out = [f"<section class='experiment' id='{_e(r.name)}'><h3>{_e(r.name)}</h3>",
           f"<p>{_e(r.summary)}</p>",
           f"<p class='meta'>{_e(describe(tally(r.result.claims)))} · {r.seconds:.1f} s · "
           f"<a href='{folder}/report.md'>report.md</a> · <a href='{folder}/metrics.json'>metrics.json</a> · "
           f"<a href='{folder}/config.json'>config.json</a>"
           + "".join(f" · <a href='{folder}/{_e(name)}'>{_e(label)}</a>" for name, label in r.result.links.items())
           + "</p>"]
    if r.result.summary:
        out.append(f"<p class='run-summary'>{_e(r.result.summary)}</p>")
    out.append("<div class='scroll'><table class='claims'><thead><tr><th class='status'>status</th><th>claim</th>"
               "<th class='num'>measured</th><th class='num'>expected</th><th class='num'>tolerance</th><th>test</th>"
               "</tr></thead><tbody>")
    out += [_claim_row(c) for c in r.result.claims]
    out.append("</tbody></table></div>")
    if r.result.figures:  # a click opens the figure at full size
        out.append("<div class='figures'>")
        for name, caption in r.result.figures.items():
            src = f"{folder}/{_e(name)}"
            out.append(f"<figure><a href='{src}'><img src='{src}' alt='{_e(caption)}'></a>"
                       f"<figcaption>{_e(caption)}</figcaption></figure>")
        out.append("</div>")
    out.append("</section>")
    return "\n".join(out)


def demo_index_html(runs: list[DemoRun], skipped: list[Skipped], seconds: float, settings: str) -> str:
    """One page that reads like the talk: a summary table, then each part's experiments in order,
    every claim with its status (a failing claim with its explanation, an erratum with its
    correction) and every figure. Self-contained: no external resources."""
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>"
           "<meta name='viewport' content='width=device-width, initial-scale=1'><title>attnlab demo</title>"
           f"<style>{CSS}</style></head><body><main>",
           "<h1>attnlab demo</h1>",
           f"<p class='lead'><b>{_e(describe(tally(_all_claims(runs))))}</b> · {len(runs)} experiments in "
           f"{seconds:.0f} s · {_e(settings)} · {_e(decided_line(runs))}</p>",
           "<p class='legend'>Status: <span class='ok'>holds</span> — the measurement meets the prediction; "
           "<span class='bad'>fails</span> — it does not (the reason is given beside it); "
           "<span class='badge unresolved'>unresolved</span> — its interval (shown beside the measurement, over n "
           "items or seeds) straddles the tolerance: the data support neither verdict; "
           "<span class='badge erratum'>erratum</span> — the source's statement as printed is wrong, its "
           "corrected claim follows; <span class='badge finding'>finding</span> — measured, with no prediction "
           "to meet. Each experiment's folder holds its config.json, metrics.json, report.md and figures.</p>",
           _summary_table(runs, seconds)]
    if skipped:
        out.append("<section id='skipped'><h3>Not run here</h3><ul class='skipped'>")
        out += [f"<li><b>{_e(s.name)}</b> ({_e(s.part)}): {_e(s.reason)}</li>" for s in skipped]
        out.append("</ul></section>")
    for i, (part, group) in enumerate(groupby(runs, key=lambda r: r.part)):
        out.append(f"<section class='part' id='{_slug(part)}'><h2{' class=first' if i == 0 else ''}>{_e(part)}</h2>")
        out += [_experiment_section(r) for r in group]
        out.append("</section>")
    out.append("</main></body></html>")
    return "\n".join(out)
