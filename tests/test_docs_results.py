"""Every number in a docs table comes from a committed result file.

Above each table of measured numbers in README.md, docs/*.md and benchmarks/README.md stands a marker
naming its source, relative to the repository root:

    <!-- results: benchmarks/results/dejavu/metrics.json, benchmarks/results/dejavu/config.json -->

(or ``<!-- results: pending: COMMAND -->`` for a table whose run is not committed yet; those are listed, not
checked; ``<!-- results: none: WHY -->`` for a table that quotes no measurement, e.g. version pins). Each
number in the table's body cells, the first column (the row's label) aside, must be found in a cited file at
the precision it is printed with: a JSON number rounded to the printed decimals (a percentage as 100x the
stored fraction, MiB as bytes / 2**20), or the same text in a Markdown report.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*results:\s*(.*?)\s*-->")
NUMBER = re.compile(r"(?<![\w.])([-−+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(\s*(?:%|MiB|GiB))?")


def marked_tables(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line number, marker text, the table's body rows) for every marker in ``path``."""
    lines = path.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        m = MARKER.search(line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("|"):
            j += 1
        rows = []
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append(lines[j])
            j += 1
        found.append((i + 1, m.group(1), rows[2:]))  # header and |---| rows aside
    return found


def cell_numbers(row: str) -> list[tuple[float, int, str, str]]:
    """(value, decimals, unit, as printed) for each number in the row's cells but the first."""
    cells = [c.replace("**", "").replace("`", "") for c in row.strip().strip("|").split("|")[1:]]
    out = []
    for cell in cells:
        for sign, whole, frac, unit in NUMBER.findall(cell):
            text = whole.replace(",", "") + (frac or "")
            value = float(text) * (-1 if sign in "-−" and sign else 1)
            out.append((value, len(frac) - 1 if frac else 0, (unit or "").strip(), f"{sign}{whole}{frac}{unit}"))
    return out


def source_values(paths: list[Path]) -> tuple[list[float], str]:
    """Every number in the JSON files, and the text of the Markdown ones."""
    values, text = [], ""

    def walk(x):
        if isinstance(x, bool):
            return
        if isinstance(x, (int, float)):
            values.append(float(x))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, str):
            text_values.append(x)

    text_values: list[str] = []
    for p in paths:
        if p.suffix == ".json":
            walk(json.loads(p.read_text()))
        else:
            text += p.read_text() + "\n"
    return values, text + "\n".join(text_values)


def found(value: float, decimals: int, unit: str, printed: str, values: list[float], text: str) -> bool:
    scale = {"%": 100.0, "MiB": 2.0**-20, "GiB": 2.0**-30}.get(unit, 1.0)
    tol = 0.5 * 10.0**-decimals + 1e-9
    if any(abs(abs(v * s) - abs(value)) <= tol for v in values for s in (1.0, scale)):  # sign aside
        return True
    plain = NUMBER.match(printed.lstrip("+-−"))  # the printed digits, in a report's text
    digits = plain.group(2).replace(",", "") + (plain.group(3) or "")
    return re.search(rf"(?<![\d.]){re.escape(digits)}(?![\d])", text.replace(",", "")) is not None


def cases():
    for doc in DOCS:
        if doc.exists():
            for line, marker, rows in marked_tables(doc):
                yield pytest.param(doc, line, marker, rows, id=f"{doc.relative_to(ROOT)}:{line}")


@pytest.mark.parametrize("doc, line, marker, rows", list(cases()))
def test_each_docs_table_number_is_in_its_cited_result_file(doc, line, marker, rows):
    if marker.startswith(("pending", "none")):
        pytest.skip(f"not checked: {marker}")
    paths = [ROOT / p.strip() for p in marker.split(",") if p.strip()]
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.is_file()]
    assert not missing, f"{doc.name}:{line} cites files that are not committed: {missing}"
    assert rows, f"{doc.name}:{line}: a results marker with no table under it"
    values, text = source_values(paths)
    absent = [f"{printed!r} (row {r.split('|')[1].strip()!r})" for r in rows
              for value, decimals, unit, printed in cell_numbers(r)
              if not found(value, decimals, unit, printed, values, text)]
    assert not absent, f"{doc.name}:{line}: numbers not in {marker}: {', '.join(absent[:12])}"


def test_the_checker_catches_a_number_its_file_lacks(tmp_path):
    """The check itself can fail: a table number that is in no cited file is reported."""
    (tmp_path / "m.json").write_text(json.dumps({"ppl": 28.034, "share": 0.709}))
    values, text = source_values([tmp_path / "m.json"])
    assert found(28.03, 2, "", "28.03", values, text) and found(70.9, 1, "%", "70.9%", values, text)
    assert not found(28.04, 2, "", "28.04", values, text) and not found(71.0, 1, "%", "71.0%", values, text)


def unmarked_tables(path: Path) -> list[int]:
    """Line numbers of the tables in ``path`` with a decimal number in a body cell and no marker above."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        starts = line.lstrip().startswith("|") and (i == 0 or not lines[i - 1].lstrip().startswith("|"))
        if not starts:
            continue
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body = []
        for row in lines[i + 2:]:
            if not row.lstrip().startswith("|"):
                break
            body.append(row)
        if not MARKER.search(above) and any(d > 0 for r in body for _, d, _, _ in cell_numbers(r)):
            out.append(i + 1)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_of_measured_numbers_names_its_source(doc):
    assert not unmarked_tables(doc), f"{doc.name}: tables at lines {unmarked_tables(doc)} need a results marker"
