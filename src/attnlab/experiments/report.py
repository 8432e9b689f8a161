"""Human-readable reports: ``report.md`` per experiment and the demo's (its ``index.html``: ``report_html``)."""
from __future__ import annotations

import json
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


def fmt(x: Any) -> str:
    if x is None:
        return NONE
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def measured(c) -> str:
    """The measured value, and its interval and n where the claim carries them: '0.0175 [-0.01, 0.045], n=400'."""
    if c.interval is None:
        return fmt(c.measured)
    lo, hi = c.interval
    return f"{fmt(c.measured)} [{fmt(lo)}, {fmt(hi)}], n={c.n}"


WHY = {"fails": "why it fails", "unresolved": "why unresolved"}


def asides(c) -> list[tuple[str, str]]:
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
    noted = any(asides(c) for c in claims)
    head = ["", "claim", "measured", "expected", "tolerance", "test"] + (["note"] if noted else [])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in claims:
        cells = [MARK[c.status], c.claim, measured(c), fmt(c.expected), fmt(c.tolerance), fmt(c.test)]
        if noted:
            cells.append("; ".join(f"{label}: {text}" for label, text in asides(c)))
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


def all_claims(runs: list[DemoRun]) -> list:
    return [c for r in runs for c in r.result.claims]


def decided_line(runs: list[DemoRun]) -> str:
    """Whether every experiment decided a claim (it held, failed, or was an erratum), else which did not."""
    none = [r.name for r in runs if not any(c.status in ("holds", "fails", "erratum") for c in r.result.claims)]
    return ("Every experiment decided at least one claim." if not none else
            f"No claim decided in {len(none)} of {len(runs)} experiments: {', '.join(none)}.")


def demo_report_md(runs: list[DemoRun], skipped: list[Skipped], seconds: float, settings: str) -> str:
    """The demo as markdown: the summary table, then each part of the talk with its claims."""
    parts = ["# attnlab demo", "",
             f"{describe(tally(all_claims(runs)))}: {len(runs)} experiments in {seconds:.0f} s ({settings}). "
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
