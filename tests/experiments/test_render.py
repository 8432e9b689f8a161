"""The docs renderer (attnlab.experiments.render): fields, filters, expressions, refusals, and the check."""
from __future__ import annotations

import json
import shutil

import pytest

from attnlab.experiments import render
from attnlab.experiments.render import RenderError, render_all, render_text

METRICS = {
    "command": "attnlab reproduce x --set steps=3 --out runs/x",
    "zero": 0.9130872,
    "claims": [{"claim": "share of h exactly zero >= 90%", "measured": 0.913, "status": "holds"},
               {"claim": "decode faster than dense", "measured": 1.4624, "status": "fails"},
               {"claim": "recall within a point", "measured": 0.01, "status": "unresolved"}],
    "claim_counts": {"holds": 1, "fails": 1, "unresolved": 1, "erratum": 0, "finding": 2},
    "rows": [{"policy": "h2o", "ppl": 4.8094}, {"policy": "sinks", "ppl": 5.1}],
    "kv_bytes": 94371840, "delta": -0.0034, "runs": {"sinks 4+252": {"ppl": 4.809}},
}


@pytest.fixture
def root(tmp_path):
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "metrics.json").write_text(json.dumps(METRICS))
    (tmp_path / "res" / "report.md").write_text("# x\n\nCommand: `attnlab reproduce y --out res`  \n")
    (tmp_path / "res" / "result.json").write_text(json.dumps({"speedup": 2.5}))
    return tmp_path


USE = "<!-- use m = res/metrics.json -->\n<!-- use b = res/result.json -->\n"


@pytest.mark.parametrize("placeholder, text", [
    ("m:zero | .1%", "91.3%"),
    ("m:claims[~decode faster].measured | .3f", "1.462"),
    ("m:claims[status=unresolved].measured | .2f", "0.01"),
    ("m:claims[-1].measured | .2f", "0.01"),
    ("m:rows[policy=h2o].ppl | .3f", "4.809"),
    ('m:runs["sinks 4+252"].ppl | .2f', "4.81"),
    ("m:kv_bytes | mib | .1f", "90.0"),
    ("m:delta | x100 | .2f | minus", "−0.34"),
    ("m:delta | sign", "−"),
    ("m:claim_counts | holds", "1/3 hold"),
    ("m: | counts", "1/3 claims hold, 1 fail, 1 unresolved, 2 findings"),
    ("m:claims | holds", "1/3 hold"),
    ("b:speedup | met >= 1.4", "met"),
    ("b:speedup | Met < 1.4", "Not met"),
    ("m:delta / 1000000 | .0e | e", "-3e-9"),
    ("m:claims[~recall within a point].measured | .2f", "0.01"),
    ("b:speedup | met >= 3", "not met"),
    ("(b:speedup - 1) / (m:zero * 2) | .4f", f"{1.5 / (0.9130872 * 2):.4f}"),
    ("max(b:speedup, 3) | .1f", "3.0"),
    ("m:command", "attnlab reproduce x --set steps=3 --out runs/x"),
    ('"1.53"', "1.53"),
])
def test_each_placeholder_renders_its_field(root, placeholder, text):
    assert render_text(USE + "{{ " + placeholder + " }}", root) == USE + text


def test_a_file_without_a_command_field_reads_its_folders(root):
    """A result.json or result.md beside the metrics.json that records the command; else report.md's line."""
    assert render_text(USE + "`{{ b:command }}`", root).endswith("`attnlab reproduce x --set steps=3 --out runs/x`")
    (root / "rep").mkdir()
    (root / "rep" / "result.md").write_text("| a | b |\n|---|---|\n| int8 | 2.88x |\n")
    (root / "rep" / "report.md").write_text("# x\n\nCommand: `attnlab reproduce y --out rep`  \n")
    text = "<!-- use r = rep/result.md -->\n`{{ r:command }}` {{ r:tables[0].rows.int8.b | .2f }}"
    assert render_text(text, root).endswith("`attnlab reproduce y --out rep` 2.88")
    (root / "rep" / "report.md").unlink()
    with pytest.raises(RenderError, match="records no command"):
        render_text(text, root)


@pytest.mark.parametrize("placeholder, why", [
    ("m:nope", "no key 'nope'"), ("z:zero", "no source named 'z'"), ("m:rows[policy=tova].ppl", "no element"),
    ("m:zero | bogus", "unknown filter"), ("__import__('os')", "not allowed"), ("m:claims[7].measured", "index"),
])
def test_a_bad_placeholder_is_one_error_naming_its_line(root, placeholder, why):
    with pytest.raises(RenderError) as e:
        render_text(USE + "line three\n{{ " + placeholder + " }}", root, "t.md")
    assert "t.md:4:" in str(e.value) and why in str(e.value)


def test_a_missing_result_file_is_named(root):
    with pytest.raises(RenderError, match="res/gone.json is not committed"):
        render_text("<!-- use g = res/gone.json -->\n{{ g:x }}", root)


def test_check_reports_a_document_changed_by_hand_and_write_restores_it(root):
    """The whole loop: render, edit one digit of the document, --check exits 1 naming it, writing restores."""
    (root / "docs" / "templates" / "docs").mkdir(parents=True)
    (root / "docs" / "templates" / "docs" / "a.md").write_text(USE + "| x | {{ m:zero | .3f }} |\n")
    assert render.main(["--root", str(root)]) == 0
    doc = root / "docs" / "a.md"
    assert doc.read_text().endswith("| x | 0.913 |\n")
    assert render.main(["--root", str(root), "--check"]) == 0
    doc.write_text(doc.read_text().replace("0.913", "0.914"))
    assert render_all(root, write=False) == [doc]
    assert render.main(["--root", str(root), "--check"]) == 1
    assert render.main(["--root", str(root)]) == 0 and doc.read_text().endswith("| x | 0.913 |\n")


def test_a_result_changed_changes_the_document(root):
    """Docs follow their results: a rerun's new number reaches the document on the next render."""
    shutil.copy(root / "res" / "metrics.json", root / "res" / "old.json")
    text = USE + "{{ m:rows[policy=sinks].ppl | .2f }}"
    before = render_text(text, root)
    data = json.loads((root / "res" / "metrics.json").read_text())
    data["rows"][1]["ppl"] = 5.2
    (root / "res" / "metrics.json").write_text(json.dumps(data))
    assert before.endswith("5.10") and render_text(text, root).endswith("5.20")


def test_no_templates_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert render.main(["--root", str(tmp_path)]) == 2
    assert "docs/templates" in capsys.readouterr().err


def test_binder_binds_a_number_to_the_one_field_that_prints_as_it(root):
    from attnlab.experiments.render_bind import candidates, scan
    text = USE + "zeros 91.31%, speed 2.50x, ppl 4.809 and 0.5\n"
    found = {m.group(0): c for m, c in scan(text, root)}
    assert [p for _, p in found["91.31%"]] == ["zero"]
    assert {p for _, p in found["4.809"]} == {"rows[policy=h2o].ppl", 'runs["sinks 4+252"].ppl'}
    for m, cands in scan(text, root):
        for body, _ in cands:  # every candidate renders back to exactly what was typed
            assert render_text(USE + "{{ " + body + " }}", root) == USE + m.group(0).strip()
    assert candidates(("", "9", ".99", ""), {"m": METRICS}) == []
