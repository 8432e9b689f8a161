"""The demo's ``index.html``: every experiment's claims on one page in the talk's order, a summary table first
(the Markdown reports are :mod:`attnlab.experiments.report`)."""
from __future__ import annotations

import html
import re
from itertools import groupby
from typing import Any

from attnlab.experiments.claims import describe, tally
from attnlab.experiments.report import (
    COUNTED,
    HEADS,
    MARK,
    DemoRun,
    Skipped,
    all_claims,
    asides,
    decided_line,
    fmt,
    measured,
)

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
    out.append(f"</tbody><tfoot><tr><td>all {len(runs)}</td><td></td>{_count_cells(tally(all_claims(runs)))}"
               f"<td class='num'>{seconds:.0f} s</td><td></td></tr></tfoot></table></div>")
    return "\n".join(out)


def _claim_row(c) -> str:
    if c.status in ("holds", "fails"):
        mark = f"<span class='{'ok' if c.status == 'holds' else 'bad'}' title='{c.status}'>{MARK[c.status]}</span>"
    else:
        mark = f"<span class='badge {c.status}'>{MARK[c.status]}</span>"
    notes = "".join(f"<div class='aside'><b>{_e(label)}:</b> {_e(text)}</div>"
                    for label, text in asides(c))
    return (f"<tr class='{c.status}'><td class='status'>{mark}</td><td class='claim'>{_e(c.claim)}{notes}</td>"
            f"<td class='num'>{_e(measured(c))}</td><td class='num'>{_e(fmt(c.expected))}</td>"
            f"<td class='num'>{_e(fmt(c.tolerance))}</td><td>{_e(fmt(c.test))}</td></tr>")


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
           f"<p class='lead'><b>{_e(describe(tally(all_claims(runs))))}</b> · {len(runs)} experiments in "
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
