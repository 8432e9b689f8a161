r"""Docs rendered from results: every measured number in README.md, docs/*.md and benchmarks/README.md is
written here, from a field of a committed result file, never typed by hand.

The docs' sources are templates under ``docs/templates/``, one per document, at the document's own path
(``docs/templates/README.md`` -> ``README.md``, ``docs/templates/docs/kv.md`` -> ``docs/kv.md``). A template
is the document with its numbers as placeholders:

    <!-- use dv = benchmarks/results/dejavu-relu-8l/metrics.json -->
    recall {{ dv:claims[~predictor].measured | .3f }}, decode {{ dv:decode.speedup | .2f }}x,
    {{ dv:claim_counts | holds }} -- `{{ dv:command }}`

- ``<!-- use ALIAS = PATH -->`` names a result file (relative to the repository root) for the template;
  it stays in the rendered document as a comment, so a reader of the source sees where numbers come from.
- ``{{ REF | FILTER ... }}``: REF is ``ALIAS:PATH``, a field of that file; PATH is keys and indexes joined by
  dots -- ``rows[0].ppl``, ``runs["sinks 4+252"].ppl``, ``claims[~decode at batch 1].measured`` (the first
  element whose text contains the words after ``~``), ``rows[policy=h2o].ppl`` (the first whose field equals
  the value). An empty PATH is the whole file. ``command`` is the command that wrote the file (its own
  "command", else its report.md's "Command:" line). REFs may be combined with ``+ - * /``, numbers,
  ``abs``, ``min``, ``max`` (operators between spaces): ``{{ a:dense_ms / a:sparse_ms | .2f }}``.
- FILTERs apply left to right: a Python format spec (``.3f``, ``,d``, ``+.1%``, ``.0f``), or ``mib`` / ``gib``
  (bytes to MiB / GiB), ``x100``, ``neg``, ``abs``, ``minus`` (a typographic minus sign), ``holds`` (claim
  counts -> "k/n hold"), ``counts`` (claim counts -> "k/n claims hold, f fail, ..."), ``met >= 1.4`` (the
  word "met" or "not met", from the number and its goal; ``Met >= 1.4`` capitalised), ``sign`` ("+" or "−"),
  ``e`` (a number formatted ``.0e`` written short: "2e-09" -> "2e-9"), ``grab /words (\S+) words/``
  (the number a text holds between those words: a Markdown report's ``text``).
- A Markdown result file (a benchmark's result.md) reads as ``text`` and ``tables``: each table's ``heading``
  (the last heading above it) and ``rows`` by first cell, each a dict by column header, numbers parsed
  ("2.88x" -> 2.88, "15%" -> 0.15): ``{{ bd:tables[~batch 1].rows.int8["tokens/s"] | .1f }}``.
- ``<!-- include docs/templates/benchmarks/_parts/decode.md -->`` (a line of its own) inserts a part: a long
  document is written in parts, in folders whose names start with ``_``.
- ``{{ "1.53" }}`` writes a literal: a number that no run of ours measures (a paper's published figure, a
  setting), said so where it stands.

``python -m attnlab.experiments.render`` writes every document; ``--check`` writes nothing and exits 1 on any
document that differs from its rendering (the test suite runs it).
"""
from __future__ import annotations

import ast
import math
import operator
import re
import sys
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.core.io import write_atomic
from attnlab.experiments.render_fields import Sources, cell_value

TEMPLATES = Path("docs/templates")
INCLUDE = re.compile(r"^<!--\s*include\s+(\S+)\s*-->\n", re.M)
USE = re.compile(r"<!--\s*use\s+([A-Za-z]\w*)\s*=\s*(\S+)\s*-->")
PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
REF = re.compile(r"(?<![\w\"'])([A-Za-z]\w*):((?:[^\s\[\]|(),]|\[[^\]]*\])*)")


class RenderError(UsageError):
    """A placeholder that cannot be rendered: its template, line and why."""


# --------------------------------------------------------------------------- expressions and filters
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"abs": abs, "min": min, "max": max}


def _eval(node, names: dict):
    if isinstance(node, ast.Expression):
        return _eval(node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand, names))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        return _CALLS[node.func.id](*(_eval(a, names) for a in node.args))
    raise ValueError(f"not allowed in a placeholder: {ast.dump(node)[:60]}")


def evaluate(expr: str, sources: Sources):
    """A REF, or an arithmetic expression over REFs (see the module's docstring)."""
    names = {}

    def bind(m: re.Match) -> str:
        names[f"_v{len(names)}"] = sources.get(m.group(1), m.group(2))
        return f"_v{len(names) - 1}"

    return _eval(ast.parse(REF.sub(bind, expr.strip()), mode="eval"), names)


def _counts(value) -> dict:
    if isinstance(value, dict) and "claim_counts" in value:
        value = value["claim_counts"]
    if isinstance(value, list):  # a list of claims
        out: dict = {}
        for c in value:
            out[c["status"]] = out.get(c["status"], 0) + 1
        value = out
    if not isinstance(value, dict) or "holds" not in value:
        raise ValueError("holds/counts read claim counts (a metrics file, its claim_counts or its claims)")
    return value


def _holds(value) -> str:
    n = _counts(value)
    checked = n.get("holds", 0) + n.get("fails", 0) + n.get("unresolved", 0)
    return f"{n.get('holds', 0)}/{checked} hold"


def _describe(value) -> str:
    from attnlab.experiments.claims import STATUSES, describe  # torch-free
    n = _counts(value)
    return describe({s: n.get(s, 0) for s in STATUSES})


_MET = re.compile(r"([Mm])et\s*(>=|<=|>|<)\s*(-?[\d.]+(?:e-?\d+)?)$")
FILTERS = {
    "mib": lambda v: v / 2**20, "gib": lambda v: v / 2**30, "x100": lambda v: v * 100, "neg": lambda v: -v,
    "abs": abs, "holds": _holds, "counts": _describe,
    "minus": lambda v: v.replace("-", "−") if isinstance(v, str) else (f"{v}".replace("-", "−")),
    "sign": lambda v: "−" if v < 0 else "+",
    "e": lambda v: re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), str(v)),
}


_GRAB = re.compile(r"grab\s+/(.*)/$")


def apply_filter(value, spec: str):
    spec = spec.strip()
    if spec in FILTERS:
        return FILTERS[spec](value)
    g = _GRAB.match(spec)
    if g:  # a number in a text, found by the words around it: grab /int8: (\S+)x fp32/
        hit = re.search(g.group(1), value if isinstance(value, str) else "")
        if not hit:
            raise ValueError(f"grab: /{g.group(1)}/ finds nothing")
        return cell_value(hit.group(1))
    m = _MET.match(spec)
    if m:
        goal = float(m.group(3))
        ok = {">=": value >= goal, "<=": value <= goal, ">": value > goal, "<": value < goal}[m.group(2)]
        word = "met" if ok else "not met"
        return word.capitalize() if m.group(1) == "M" else word
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        try:
            return format(value, spec)
        except ValueError:
            raise ValueError(f"unknown filter or format {spec!r}: one of {sorted(FILTERS)}, 'met >= N' "
                             "or a format spec such as .3f") from None
    raise ValueError(f"unknown filter {spec!r} for a {type(value).__name__}")


def _split_pipes(body: str) -> list[str]:
    """The expression and its filters: ``|`` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, "", ""
    for ch in body:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and depth == 0:  # inside a selector ([~it's]) a quote is text
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return parts + [cur]


def render_placeholder(body: str, sources: Sources) -> str:
    expr, *filters = _split_pipes(body)
    value = evaluate(expr, sources)
    for spec in filters:
        value = apply_filter(value, spec)
    return str(value)


# --------------------------------------------------------------------------- documents
def expand_includes(text: str, root: Path, depth: int = 0) -> str:
    """``<!-- include docs/templates/x/_parts/y.md -->`` lines replaced by that file (a long document's parts:
    a folder whose name starts with ``_`` holds parts, not documents)."""
    if depth > 4:
        raise RenderError("includes nested more than 4 deep")

    def one(m: re.Match) -> str:
        part = root / m.group(1)
        if not part.is_file():
            raise RenderError(f"included file {m.group(1)} is missing")
        return expand_includes(part.read_text(), root, depth + 1)

    return INCLUDE.sub(one, text)


def render_text(text: str, root: Path, name: str = "<template>") -> str:
    """A template's text with every placeholder replaced; a bad one raises RenderError naming its line
    (of the template with its includes expanded)."""
    text = expand_includes(text, root)
    sources = Sources(root)
    for alias, rel in USE.findall(text):
        sources.use(alias, rel)

    def one(m: re.Match) -> str:
        try:
            return render_placeholder(m.group(1), sources)
        except (KeyError, ValueError, TypeError, IndexError, SyntaxError, ZeroDivisionError) as e:
            line = text.count("\n", 0, m.start()) + 1
            raise RenderError(f"{name}:{line}: {{{{{m.group(1).strip()}}}}}: {e}") from None

    return PLACEHOLDER.sub(one, text)


def documents(root: Path) -> list[tuple[Path, Path]]:
    """(template, document) pairs: every file under docs/templates at its document's path."""
    base = root / TEMPLATES
    return [(t, root / t.relative_to(base)) for t in sorted(base.rglob("*.md"))
            if not any(part.startswith("_") for part in t.relative_to(base).parts)]


def render_all(root: Path, write: bool, only: list[Path] | None = None) -> list[Path]:
    """Render every template (or those of the documents ``only``); write the documents (aside, then renamed),
    or return those that differ."""
    differ = []
    wanted = None if not only else {(root / p).resolve() for p in only}
    for template, doc in documents(root):
        if wanted is not None and doc.resolve() not in wanted:
            continue
        out = render_text(template.read_text(), root, str(template.relative_to(root)))
        if not doc.is_file() or doc.read_text() != out:
            differ.append(doc)
            if write:
                write_atomic(doc, out)
    return differ


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m attnlab.experiments.render", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=Path("."), help="the repository's root (default: here)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a document differs")
    p.add_argument("only", nargs="*", type=Path, help="render only these documents (default: all)")
    args = p.parse_args(argv)
    if not (args.root / TEMPLATES).is_dir():
        print(f"error: no {TEMPLATES} under {args.root.resolve()}: run from the repository's root or give --root",
              file=sys.stderr)
        return 2
    try:
        known = {d.resolve() for _, d in documents(args.root)}
        unknown = [str(p) for p in args.only if (args.root / p).resolve() not in known]
        if unknown:
            raise RenderError(f"no template for {', '.join(unknown)} (templates live under {TEMPLATES}/)")
        differ = render_all(args.root, write=not args.check, only=args.only)
    except RenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for doc in differ:
        print(f"{'differs from its template' if args.check else 'rendered'}: {doc.relative_to(args.root)}")
    return 1 if (args.check and differ) else 0


if __name__ == "__main__":
    sys.exit(main())
