"""The million-token run's report: its table and figure, drawn again from million_tokens.json (``--redraw``),
and the join of a run split across processes (``--merge``).

Why split: the whole run (both policies and the control, ~4.5 h on 2 AVX2 cores) does not fit one 3-hour
session, and a checkpoint on a machine that is shut down is lost with it. Each policy alone (~1.5-2 h) and
the control alone (~40 min) do fit, and a policy's stream does not depend on the other's, so each part can
run whole in one process and the parts are joined afterwards. The control's sampled tokens come from the
shared --seed and the segment, so every part samples the same tokens and the ratios are on the same tokens.
Imported by million_tokens.py (the benchmarks run as scripts, so their folder is on the path), and run by
it after every segment as ``python million_report.py OUT``, which redraws OUT's table and figure in a
process of its own, so that plotting's memory is not counted in the stream's.
"""
from __future__ import annotations

import io
import json
import math
import statistics
from pathlib import Path

from attnlab.core.io import write_atomic, write_json
from attnlab.core.plotting import plt

from host import parser  # benchmarks/host.py

PART_ONLY = ("policies", "control")  # the settings in which the parts of one split run may differ


def figure(report: dict, path) -> None:
    """PPL per segment; the stream's PPL over re-computation's on the same sampled tokens (the measure of
    "flat", since stretches of text differ in difficulty); the cache's bytes; the process's memory."""
    policies, ctrl = report["policies"], report["control"]
    fig, ax = plt.subplots(1, 4, figsize=(20, 3.8), layout="constrained")
    ax[0].plot([r["tokens"] for r in ctrl], [r["recompute_ppl"] for r in ctrl], "k-x",
               label="re-computation (sampled tokens)")
    ax[1].axhline(1.0, color="k", lw=0.8, label="= re-computation")
    for i, (name, rows) in enumerate(policies.items()):
        x = [r["tokens"] for r in rows]
        ax[0].plot(x, [r["ppl"] for r in rows], "-o", color=f"C{i}", label=f"{name} (all)")
        ax[1].plot([c["tokens"] for c in ctrl], [ratio(c, name) for c in ctrl], "-o", color=f"C{i}", label=name)
        ax[2].plot(x, [r["kv_bytes"] / 2**20 for r in rows], "-o", label=name)
        ax[3].plot(x, [r["peak_rss_mib"] for r in rows], "-o", color=f"C{i}", label=f"{name}: peak")
        ax[3].plot(x, [r["rss_mib"] for r in rows], ":", color=f"C{i}", label=f"{name}: now")
        ax[3].plot(x, [r.get("trimmed_rss_mib", math.nan) for r in rows], "--x", color=f"C{i}",
                   label=f"{name}: after malloc_trim")
    ax[0].set(xlabel="tokens streamed", ylabel="PPL per segment", title="perplexity", yscale="log")
    ax[1].set(xlabel="tokens streamed", ylabel="PPL / re-computation's", ylim=(0, None),
              title="against re-computation, same sampled tokens")
    ax[2].set(xlabel="tokens streamed", ylabel="KV cache (MiB)", title="stored keys and values", ylim=(0, None))
    ax[3].set(xlabel="tokens streamed", ylabel="MiB", title="process memory (RSS)", ylim=(0, None))
    for a in ax:
        if a.get_legend_handles_labels()[0]:  # a part without policies draws empty panels
            a.legend(fontsize=7)
        a.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:,.0f}k")  # 1,048,576 tokens: labels would collide
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)  # one figure per segment: don't keep them all


def ratio(control_row: dict, name: str) -> float:
    """A policy's PPL over re-computation's on the segment's sampled tokens (NaN where either is missing)."""
    return control_row.get(f"{name}_ppl", math.nan) / control_row.get("recompute_ppl", math.nan)


def table(report: dict) -> str:
    """The report as a Markdown table, a row per segment: PPL per policy, the control on the sampled tokens
    and each policy's ratio to it there, the stored bytes, and RSS (the largest of the processes that
    streamed the policies: in one run one process streams every policy; in a merged run each its own)."""
    names = list(report["policies"])
    head = (["tokens streamed"] + [f"{n} PPL" for n in names] + ["re-computation (sampled)"]
            + [f"{n} / re-comp." for n in names]
            + ["KV MiB (" + " / ".join(names) + ")", "RSS MiB", "after malloc_trim", "peak RSS MiB"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    control = {c["tokens"]: c for c in report["control"]}
    for i, first in enumerate(report["policies"][names[0]] if names else report["control"]):  # or the control's
        rows, c = [report["policies"][n][i] for n in names], control.get(first["tokens"], {})
        cells = ([f"{first['tokens']:,}"] + [f"{r['ppl']:.2f}" for r in rows]
                 + [_num(c.get("recompute_ppl", math.nan))] + [_num(ratio(c, n)) for n in names]
                 + [" / ".join(f"{r['kv_bytes'] / 2**20:.0f}" for r in rows) or "no cache"]
                 + [_mib(max((r.get(k, math.nan) for r in rows), default=math.nan))
                    for k in ("rss_mib", "trimmed_rss_mib", "peak_rss_mib")])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(report: dict) -> str:
    """What the prose quotes, computed here so it comes from the report: each policy's ratio to
    re-computation over the segments and its rank correlation with the segment (a drift would show as a
    trend), its median tokens/s, and its PPL over the first policy's on the same segments."""
    from scipy.stats import spearmanr

    names, lines = list(report["policies"]), []
    for n in names:
        ratios = [q for q in (ratio(c, n) for c in report["control"]) if not math.isnan(q)]
        rows = report["policies"][n]
        line = f"- {n}: median {statistics.median(r['tokens_per_s'] for r in rows):.0f} tokens/s"
        if len(ratios) > 2:
            rho, p = spearmanr(range(len(ratios)), ratios)
            line += (f"; over re-computation {min(ratios):.2f}–{max(ratios):.2f}× in {len(ratios)} segments, "
                     f"Spearman ρ against the segment {rho:+.2f} (p = {p:.2f})")
        if n != names[0]:
            over = [r["ppl"] / f["ppl"] for r, f in zip(rows, report["policies"][names[0]])]
            line += (f"; PPL over {names[0]}: {min(over):.2f}–{max(over):.2f}× "
                     f"(median {statistics.median(over):.2f}×)")
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def _num(v: float) -> str:
    return "not run" if math.isnan(v) else f"{v:.2f}"


def _mib(v: float) -> str:
    return "not recorded" if math.isnan(v) else f"{v:,.0f}"


def draw(report: dict, out: Path) -> None:
    """million_tokens.md and .png from the report (each written aside and renamed)."""
    png = io.BytesIO()
    write_atomic(out / "million_tokens.md", table(report) + "\n" + summary(report))
    figure(report, png)
    write_atomic(out / "million_tokens.png", png.getvalue())


def read_report(out: Path, fail) -> dict:
    try:
        return json.loads((out / "million_tokens.json").read_text())
    except (OSError, ValueError) as e:
        fail(f"{out / 'million_tokens.json'}: {type(e).__name__}; give the --out of a million_tokens.py run")


def redraw(out: Path, fail) -> None:
    """--redraw: the table and figure again from million_tokens.json, as measured; nothing streamed."""
    draw(read_report(out, fail), out)
    print(f"redrawn: {out / 'million_tokens.md'}, {out / 'million_tokens.png'}")


def merge(parts: list[Path], out: Path, fail) -> dict:
    """--merge: one report from the parts of a split run (same settings but for the policies and the control;
    each policy streamed by one part, the control by one). Complete when every part is."""
    reports = [read_report(p, fail) for p in parts]
    base = {k: v for k, v in reports[0]["args"].items() if k not in PART_ONLY}
    for p, r in zip(parts, reports):
        other = {k: v for k, v in r["args"].items() if k not in PART_ONLY}
        if other != base:
            diff = ", ".join(f"{k}: {v} vs {other.get(k)}" for k, v in base.items() if other.get(k) != v)
            fail(f"{p} was run with other settings than {parts[0]} ({diff}): only parts of one run merge")
    policies = [n for r in reports for n in r["policies"]]
    controls = [r for r in reports if r["control"]]
    if len(set(policies)) < len(policies) or len(controls) > 1:
        fail("each policy and the control may come from one part only: leave the duplicate out of --merge")
    control = [dict(c) for c in (controls[0]["control"] if controls else [])]
    for c in control:  # each policy's PPL on the control's sampled tokens, from the part that streamed it
        for r in reports:
            for name, rows in r["policies"].items():
                row = next((x for x in rows if x["tokens"] == c["tokens"]), {})
                if "sampled_ppl" in row:
                    c[f"{name}_ppl"] = row["sampled_ppl"]
    report = {**reports[0], "args": {**base, "policies": policies, "merged_from": [str(p) for p in parts]},
              "tokens_done": min(r["tokens_done"] for r in reports),
              "complete": all(r["complete"] for r in reports) and bool(controls),
              "seconds": sum(r["seconds"] for r in reports),
              "history": [{**h, "part": ",".join(r["policies"]) or "control"} for r in reports for h in r["history"]],
              "policies": {n: rows for r in reports for n, rows in r["policies"].items()}, "control": control,
              "checks": {n: c for r in reports for n, c in (r.get("checks") or {}).items()}}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "million_tokens.json", report)
    draw(report, out)
    print(f"merged {len(parts)} parts ({'complete' if report['complete'] else 'not complete'}): {out}")
    return report


if __name__ == "__main__":  # what million_tokens.py runs after each segment; also `million_tokens.py --redraw`
    ap = parser("Redraw a million_tokens.py run's table and figure from its million_tokens.json, in a process of "
                "its own.", prog="million_report.py")
    ap.add_argument("out", type=Path, help="the run's --out folder")
    redraw(ap.parse_args().out, ap.error)
