"""Reports show every claim's status: report.md per experiment, and the demo's page in the talk's order."""
import pytest

from attnlab.experiments.claims import check, describe, erratum, finding, tally
from attnlab.experiments.registry import Experiment, Result
from attnlab.experiments.report import (
    DemoRun,
    Skipped,
    claims_markdown,
    demo_report_md,
    experiment_report,
)
from attnlab.experiments.report_html import demo_index_html
from html_page import Page

WHY = "quick mode trains 10x fewer steps than the paper"
UNSETTLED = "about 6,100 items would settle it"
BOOT = "paired bootstrap over items, 95%"
PRINTED = "slides' form: erf(v/2)/Δ is invariant"
CORRECTED = "erf(v/2)/Δ is the invariant of dv/dt = Δ∘exp(v²/4)"


def _claims_a():
    return [check("common tokens are suppressed", 1.0, 1.0, 0.0, "at_least"),
            check("distinct tokens grow <fast> & |z| > 0", 0.8, 1.0, 0.0, "at_least").because(WHY),
            finding("final attention entropy (nats)", 0.41)]


def _claims_b():
    return erratum(check(PRINTED, 0.39, 0.0, 1e-6, "at_most"), check(CORRECTED, 2e-13, 0.0, 1e-6, "at_most"))


def _unresolved():
    return check("within 1 point", 0.0175, 0.01, 0.0, "at_most", interval=(-0.01, 0.045), n=400,
                 method=BOOT).unresolved_because(UNSETTLED)


RUNS = [  # in the talk's order, as the demo hands them over
    DemoRun("scansnap-a", "Fig. A.", "Scan&Snap", "scansnap-a", Result(_claims_a(), figures={"a.png": "Figure A"}),
            1.25),
    DemoRun("joma-b", "Thm B.", "JoMA", "joma-b", Result(_claims_b(), summary="why B matters"), 0.5),
    DemoRun("kv-c", "Policy C.", "KV-cache policies", "kv-c",
            Result([check("c1", 1, 1, 0), check("c2", 2, 2, 0), _unresolved()], links={"view.html": "attention view"}),
            3.0),
]
SKIPPED = [Skipped("text-d", "real text", "needs a corpus: --set train=PATH")]


@pytest.fixture(scope="module")
def page():
    return Page(demo_index_html(RUNS, SKIPPED, 4.75, "quick settings, cpu"))


def test_summary_table_has_one_row_per_experiment_in_talk_order(page):
    rows = page.table("summary").body()
    assert [r.cells[0] for r in rows] == ["scansnap-a", "joma-b", "kv-c"]
    assert [r.cells[1] for r in rows] == ["Scan&Snap", "JoMA", "KV-cache policies"]
    for row, run in zip(rows, RUNS):
        n = tally(run.result.claims)
        assert [int(x) for x in row.cells[2:7]] == [n["holds"], n["fails"], n["unresolved"], n["erratum"],
                                                    n["finding"]]
        assert row.cells[7] == f"{run.seconds:.1f} s"
        assert row.links == [f"#{run.name}", f"{run.folder}/report.md"]  # the section and the run's report
    (total,) = [r for r in page.table("summary").rows if r.group == "tfoot"]
    assert [int(x) for x in total.cells[2:7]] == [4, 1, 1, 1, 1]
    head = [r for r in page.table("summary").rows if r.group == "thead"][0].cells
    assert head[2:7] == ["hold", "fail", "unresolved", "errata", "findings"]


def test_sections_follow_the_talk(page):
    assert [t for h, t in page.headings if h == "h2"] == ["Scan&Snap", "JoMA", "KV-cache policies"]
    assert [i for i, cls in page.sections if cls == "experiment"] == ["scansnap-a", "joma-b", "kv-c"]
    assert ("h1", "attnlab demo") in page.headings


def _rows(page, claims_table: int):
    return page.tables[1 + claims_table].body()  # tables[0] is the summary


def test_a_failing_claim_carries_its_note(page):
    held, failed, found = _rows(page, 0)
    assert held.cls == "holds" and held.cells[0] == "✓" and "note" not in held.cells[1]
    assert failed.cls == "fails" and failed.cells[0] == "✗"
    assert failed.cells[1] == f"distinct tokens grow <fast> & |z| > 0why it fails: {WHY}"  # escaped, then read back
    assert found.cls == "finding" and found.cells[0] == "finding"
    assert found.cells[2:] == ["0.41", "—", "—", "—"]  # a finding has no expected value, tolerance or test


def test_an_erratum_names_its_corrected_claim(page):
    printed, corrected = _rows(page, 1)
    assert printed.cls == "erratum" and printed.cells[0] == "erratum"
    assert printed.cells[1] == f"{PRINTED}corrected: {CORRECTED}"
    assert corrected.cls == "holds" and corrected.cells[1] == CORRECTED


def test_an_unresolved_claim_shows_its_interval_n_and_why(page):
    *_, unresolved = _rows(page, 2)
    assert unresolved.cls == "unresolved" and unresolved.cells[0] == "unresolved"
    assert unresolved.cells[1] == f"within 1 pointwhy unresolved: {UNSETTLED}interval: {BOOT}"
    assert unresolved.cells[2] == "0.0175 [-0.01, 0.045], n=400"
    assert "<span class='badge unresolved'>" in demo_index_html(RUNS, [], 1, "")
    assert ".badge.unresolved{" in demo_index_html(RUNS, [], 1, "")  # styled apart from fails and findings


def test_skipped_experiments_are_listed_with_why(page):
    assert page.items == ["text-d (real text): needs a corpus: --set train=PATH"]


def test_the_page_is_self_contained_and_figures_open_full_size(page):
    assert "script" not in page.tags and "link" not in page.tags
    assert all("://" not in u and not u.startswith("/") for u in page.urls)
    html = demo_index_html(RUNS, SKIPPED, 4.75, "quick settings, cpu")
    assert "<a href='scansnap-a/a.png'><img src='scansnap-a/a.png'" in html  # a click opens it full size
    checked = sum(c.status in ("holds", "fails") for r in RUNS for c in r.result.claims)
    assert html.count("✓") + html.count("✗") == checked  # one mark per checked claim, nowhere else
    assert describe(tally(c for r in RUNS for c in r.result.claims)) in html


def test_demo_report_md_reads_like_the_page():
    md = demo_report_md(RUNS, SKIPPED, 4.75, "quick settings, cpu")
    table = [ln for ln in md.splitlines() if ln.startswith("| [")]
    assert [ln.split("]")[0][3:] for ln in table] == ["scansnap-a", "joma-b", "kv-c"]
    assert table[0] == "| [scansnap-a](scansnap-a/report.md) | Scan&Snap | 1 | 1 | 0 | 0 | 1 | 1.2 s |"
    assert table[2] == "| [kv-c](kv-c/report.md) | KV-cache policies | 2 | 0 | 1 | 0 | 0 | 3.0 s |"
    assert "| experiment | part of the talk | hold | fail | unresolved | errata | findings | wall time |" in md
    assert f"why unresolved: {UNSETTLED}" in md and "0.0175 [-0.01, 0.045], n=400" in md
    assert [ln[3:] for ln in md.splitlines() if ln.startswith("## ")] == ["Scan&Snap", "JoMA", "KV-cache policies"]
    assert "- text-d: skipped (needs a corpus: --set train=PATH)" in md
    assert f"why it fails: {WHY}" in md and f"corrected: {CORRECTED}" in md


def _table_cells(md: str) -> list[list[str]]:
    """Split markdown table rows on unescaped '|'."""
    rows = []
    for ln in md.splitlines():
        if ln.startswith("| ") and not ln.startswith("|---"):
            cells = ln.replace("\\|", "\0").strip("|").split("|")
            rows.append([c.strip().replace("\0", "|") for c in cells])
    return rows


def test_a_runs_links_are_in_its_report_and_the_demo_page():
    assert "kv-c/view.html" in page_urls() and "kv-c/view.html" not in demo_index_html(RUNS[:2], [], 1, "")
    exp = Experiment("kv-c", "Policy C.", object, lambda cfg, ctx: None)
    assert "[attention view](view.html)" in experiment_report(exp, RUNS[2].result, {}, 1.0, "attnlab x")


def page_urls() -> list[str]:
    return Page(demo_index_html(RUNS, SKIPPED, 4.75, "quick settings, cpu")).urls


def test_experiment_report_shows_each_status():
    exp = Experiment("scansnap-a", "Fig. A.", object, lambda cfg, ctx: None)
    claims = _claims_a() + _claims_b() + [_unresolved()]
    md = experiment_report(exp, Result(claims, figures={"a.png": "Figure A"}), {"steps": 3}, 1.25, "attnlab x")
    assert f"Wall time: 1.2 s. {describe(tally(claims))}." in md
    assert "2/4 claims hold, 1 fail, 1 unresolved, 1 erratum, 1 finding" in md
    head, *rows = _table_cells(claims_markdown(claims))
    assert head == ["", "claim", "measured", "expected", "tolerance", "test", "note"]
    assert [r[0] for r in rows] == ["✓", "✗", "finding", "erratum", "✓", "unresolved"]
    assert rows[1][1] == "distinct tokens grow <fast> & |z| > 0"  # '|' escaped: the row keeps its 7 cells
    assert rows[1][6] == f"why it fails: {WHY}"
    assert rows[2][3:6] == ["—", "—", "—"]
    assert rows[3][6] == f"corrected: {CORRECTED}"
    assert rows[5][2:] == ["0.0175 [-0.01, 0.045], n=400", "0.01", "0", "at_most",
                           f"why unresolved: {UNSETTLED}; interval: {BOOT}"]
    assert md.count("✓") + md.count("✗") == 3 and "![Figure A](a.png)" in md


def test_claims_table_has_no_note_column_when_nothing_needs_one():
    head, *rows = _table_cells(claims_markdown([check("c", 1, 1, 0)]))
    assert head[-1] == "test" and rows == [["✓", "c", "1", "1", "0", "abs"]]
