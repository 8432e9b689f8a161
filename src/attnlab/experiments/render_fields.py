"""Fields of a committed result file, as the docs renderer (attnlab.experiments.render) reads them: JSON paths with
selectors, Markdown results' tables and text, and the command that wrote a file."""
from __future__ import annotations

import json
import re
from pathlib import Path

STEP = re.compile(r"\.?([^.\[\]]+)|\[([^\]]*)\]")


def _own_command(data) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("command"), str) and data["command"] != "train":
        return data["command"]
    return None


def recorded_command(path: Path, data) -> str:
    """The command that wrote ``path``: its own "command" field, else its folder's metrics.json or
    result.json's, else its report.md's "Command:" line."""
    found = _own_command(data)
    for sibling in ("metrics.json", "result.json"):
        if found is None and (path.parent / sibling).is_file() and path.name != sibling:
            found = _own_command(json.loads((path.parent / sibling).read_text()))
    report = path.parent / "report.md"
    if found is None and report.is_file():
        m = re.search(r"^Command: `(.+?)`", report.read_text(), re.M)
        found = m.group(1) if m else None
    if found is None:
        raise KeyError(f"{path} records no command (no 'command' field beside it, no report.md 'Command:' line)")
    return found


def _select(items: list, key: str):
    """``[3]``, ``[-1]``, ``[~words]`` (first element whose text contains them), ``[field=value]``."""
    key = key.strip()
    if re.fullmatch(r"-?\d+", key):
        return items[int(key)]
    if key.startswith(("'", '"')):
        raise KeyError(f"a quoted key [{key}] indexes an object, not a list")
    if key.startswith("~"):
        words = key[1:].strip()
        hits = [x for x in items if words in (json.dumps(x, ensure_ascii=False) if not isinstance(x, str) else x)]
    elif "=" in key:
        field, value = (s.strip() for s in key.split("=", 1))
        hits = [x for x in items if isinstance(x, dict) and str(x.get(field)) == value]
    else:
        raise KeyError(f"[{key}]: an index, ~words or field=value")
    if not hits:
        raise KeyError(f"no element matches [{key}]")
    return hits[0]


def field(data, path: str, source: Path):
    """The value at ``path`` in ``data`` (see the module's docstring)."""
    if path == "command":
        return recorded_command(source, data)
    value = data
    for name, bracket in STEP.findall(path):
        if name:
            if not isinstance(value, dict) or name not in value:
                have = sorted(value)[:12] if isinstance(value, dict) else type(value).__name__
                raise KeyError(f"no key {name!r} (have {have})")
            value = value[name]
        elif isinstance(value, list):
            value = _select(value, bracket)
        else:
            key = bracket.strip().strip("\"'")
            if not isinstance(value, dict) or key not in value:
                raise KeyError(f"no key [{key!r}]")
            value = value[key]
    return value


_CELL = re.compile(r"^([-−+]?\d[\d,]*(?:\.\d+)?)\s*(x|×|%|s|ms|MiB|GiB|MB)?$")


def cell_value(text: str):
    """A table cell as a number where it is one ("2.88x" -> 2.88, "15%" -> 0.15, "1,024" -> 1024), else text."""
    m = _CELL.match(text.strip().replace("**", ""))
    if not m:
        return text.strip()
    value = float(m.group(1).replace(",", "").replace("−", "-"))
    return value / 100 if m.group(2) == "%" else value


def markdown_fields(text: str) -> dict:
    """A Markdown result (a benchmark's result.md) as fields: ``text``, and ``tables``, each with the
    ``heading`` above it and its ``rows`` by first cell, each row a dict by column header:
    ``tables[~batch 1].rows.int8["tokens/s"]``."""
    tables, heading, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"\s*\|[-:| ]+\|\s*$", lines[i + 1]):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            rows, i = {}, i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows[cells[0]] = {h: cell_value(c) for h, c in zip(header, cells)}
                i += 1
            tables.append({"heading": heading, "rows": rows})
            continue
        i += 1
    return {"text": text, "tables": tables}


class Sources:
    """The result files a template names, each read once."""

    def __init__(self, root: Path):
        self.root, self.alias, self._data = root, {}, {}

    def use(self, alias: str, rel: str) -> None:
        self.alias[alias] = self.root / rel

    def get(self, alias: str, path: str):
        if alias not in self.alias:
            raise KeyError(f"no source named {alias!r}: add <!-- use {alias} = benchmarks/results/.../x.json -->")
        p = self.alias[alias]
        if p not in self._data:
            if not p.is_file():
                raise KeyError(f"{p.relative_to(self.root)} is not committed")
            self._data[p] = json.loads(p.read_text()) if p.suffix == ".json" else markdown_fields(p.read_text())
        return field(self._data[p], path, p)
