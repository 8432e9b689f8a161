"""Every measured number in README.md, docs/*.md and benchmarks/README.md is rendered from a committed result
file (attnlab.experiments.render): each document equals its template's rendering, and no template types a measured
number by hand.

After editing a template under docs/templates/ (or rerunning a result it reads), write the documents again:

    python -m attnlab.experiments.render
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from attnlab.experiments.render import PLACEHOLDER, documents, expand_includes, render_text
from attnlab.experiments.render_bind import NUMBER, SKIP

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAIRS = documents(ROOT)
COUNT = re.compile(r"(?<![\w/.])\d+\s*/\s*\d+\s+(?:claims?\s+)?(?:hold|held)")  # "9/13 claims hold" typed by hand


def test_every_document_has_a_template():
    assert sorted(d for _, d in PAIRS) == sorted(DOCS)


@pytest.mark.parametrize("template, doc", PAIRS, ids=[str(d.relative_to(ROOT)) for _, d in PAIRS])
def test_each_document_is_its_templates_rendering(template, doc):
    rendered = render_text(template.read_text(), ROOT, str(template.relative_to(ROOT)))
    if doc.read_text() != rendered:
        got, want = doc.read_text().splitlines(), rendered.splitlines()
        line = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"{doc.relative_to(ROOT)}:{line + 1} differs from its rendering "
                    f"(document: {got[line] if line < len(got) else '<end>'!r}; rendered: "
                    f"{want[line] if line < len(want) else '<end>'!r}). Edit {template.relative_to(ROOT)}, "
                    "then run `python -m attnlab.experiments.render`")


def hand_typed(text: str) -> list[str]:
    """Decimal numbers and claim counts written as text: outside code, comments, links and placeholders."""
    skip = [(m.start(), m.end()) for m in SKIP.finditer(text)]
    out = []
    for pattern in (NUMBER, COUNT):
        for m in pattern.finditer(text):
            if not any(a <= m.start() < b for a, b in skip):
                out.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0).strip()!r}")
    return out


@pytest.mark.parametrize("template, doc", PAIRS, ids=[str(d.relative_to(ROOT)) for _, d in PAIRS])
def test_no_template_types_a_measured_number_by_hand(template, doc):
    """A decimal or a claim count in prose or a table is a placeholder; one that no run of ours measures (a
    paper's figure, a setting) is written as a literal placeholder, {{ "1.53" }}, so the choice is visible."""
    found = hand_typed(expand_includes(template.read_text(), ROOT))
    assert not found, f"{template.relative_to(ROOT)}: {len(found)} numbers typed by hand: {', '.join(found[:15])}"


def test_hand_typed_finds_numbers_and_counts_and_leaves_code_and_placeholders():
    text = ("PPL 12.068 and 9/13 claims hold; `--budget 0.2` {{ a:b | .3f }} <!-- 1.5 --> [x](runs/0.5.md)\n"
            "```\nattnlab x --set keep=0.5\n```\n")
    assert [f.split(": ", 1)[1] for f in hand_typed(text)] == ["'12.068'", "'9/13 claims hold'"]


def _readme_table():
    text = expand_includes((ROOT / "docs" / "templates" / "README.md").read_text(), ROOT)
    start = text.index("| capability |")
    return text, [row for row in text[start:].split("\n\n", 1)[0].splitlines()[2:]]


def split_row(row: str) -> list[str]:
    """A table row's cells: split on "|" outside placeholders (whose filters use it) and escaped \\|."""
    row = row.replace("\\|", "\x01")
    held = PLACEHOLDER.findall(row)
    masked = PLACEHOLDER.sub(lambda m, n=iter(range(len(held))): f"\x00{next(n)}\x00", row)
    return [re.sub(r"\x00(\d+)\x00", lambda m: "{{" + held[int(m.group(1))] + "}}", c) for c in masked.split("|")]


def test_each_readme_row_prints_the_command_its_numbers_were_written_by():
    """The command beside a headline is read from the cited result file itself: the run the numbers come from."""
    _, rows = _readme_table()
    assert rows
    for row in rows:
        cells = split_row(row)
        name, command, headline = cells[1].strip(), cells[3], cells[4]
        assert re.fullmatch(r"\s*`\{\{\s*\w+:command\s*\}\}`\s*", command), f"row {name!r}: {command}"
        source = PLACEHOLDER.search(command).group(1).split(":")[0].strip()
        assert re.search(r"\{\{[^}]*\b" + source + r":(?!command)", headline), \
            f"row {name!r}: the command is {source}'s, but no headline number reads {source}"


def test_changing_a_rendered_number_by_hand_is_caught():
    """For a sample of the README table's placeholders: the document with one digit changed differs from the
    rendering, so the test above fails on it."""
    text, rows = _readme_table()
    table = "\n".join(rows)
    numeric = [m for m in PLACEHOLDER.finditer(text) if m.group(0) in table and "command" not in m.group(0)]
    assert len(numeric) >= 20, "the README table's numbers are rendered"
    rendered = render_text(text, ROOT)
    checked = 0
    for m in random.Random(0).sample(numeric, len(numeric)):
        before, after = render_text(text[:m.start()] + "\x00" + text[m.end():], ROOT).split("\x00")
        shown = rendered[len(before):len(rendered) - len(after)]
        digits = [i for i, ch in enumerate(shown) if ch.isdigit()]
        if not digits:  # a word (a claim's status: "holds", "fails")
            continue
        checked += 1
        if checked > 10:
            break
        i = digits[-1]
        changed = shown[:i] + str((int(shown[i]) + 1) % 10) + shown[i + 1:]
        assert before + changed + after != rendered
    assert checked > 10, "ten placeholders that render a number were changed"
