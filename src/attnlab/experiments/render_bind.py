"""Find, for each hand-typed number in a docs template, the fields of its result files that print as it.

    python -m attnlab.experiments.render_bind docs/templates/docs/kv.md            # list numbers and candidates
    python -m attnlab.experiments.render_bind docs/templates/docs/kv.md --write    # bind the unambiguous ones

A number is looked up in the files the template names (``<!-- use ALIAS = PATH -->``) and those cited by the
``<!-- results: ... -->`` marker above its table (given aliases of their own). It is bound -- replaced by a
``{{ ALIAS:PATH | FORMAT }}`` placeholder that prints it exactly as typed -- only when it has three or more
significant digits and one field prints as it (several fields holding the same value count as one when
they are the same quantity: the shortest path wins); everything else is listed for a person to bind. A
binder is a helper for a person, not a judge: read what it bound.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from attnlab.experiments.render import USE

RESULTS = re.compile(r"<!--\s*results:\s*(.*?)\s*-->")
# a printed number: sign, digits with optional thousands commas, decimals, then % / × / MiB / GiB
NUMBER = re.compile(r"(?<![\w.\-/=:#])([-−+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)(\s?(?:%|MiB|GiB))?(?![\w.])")
# not numbers of ours: code, comments, placeholders, link targets, arXiv ids
SKIP = re.compile(r"```.*?```|`[^`\n]*`|<!--.*?-->|\{\{.*?\}\}|\]\([^)]*\)|arXiv:?\s?\d{4}\.\d{4,5}", re.S)


def leaves(data, path: str = ""):
    """(path, number) for every number in a JSON value, paths in render.field's syntax."""
    if isinstance(data, bool):
        return
    if isinstance(data, (int, float)):
        yield path, float(data)
    elif isinstance(data, dict):
        for k, v in data.items():
            step = f".{k}" if re.fullmatch(r"[A-Za-z_][\w-]*", str(k)) else f"[\"{k}\"]"
            yield from leaves(v, (path + step) if path or step.startswith("[") else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from leaves(v, f"{path}[{_selector(data, i)}]")


def _selector(items: list, i: int) -> str:
    """A list element's selector that survives insertions: a unique name field, a claim's first words."""
    x = items[i]
    if isinstance(x, dict):
        for key in ("name", "policy", "label", "run", "method", "task", "config", "row"):
            v = x.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and \
                    sum(isinstance(y, dict) and y.get(key) == v for y in items) == 1 and "]" not in str(v):
                return f"{key}={v}"
        if isinstance(x.get("claim"), str):
            words = x["claim"].split()
            for n in range(3, min(len(words), 12) + 1):
                head = " ".join(words[:n])
                if "]" not in head and sum(isinstance(y, dict) and head in str(y.get("claim", "")) for y in items) == 1:
                    return f"~{head}"
    return str(i)


def spec_for(sign: str, whole: str, frac: str, unit: str) -> tuple[str, float, str]:
    """(format spec, scale to apply to the field, filter) that print a field as ``sign whole frac unit``."""
    decimals = len(frac) - 1
    comma = "," if "," in whole else ""
    plus = "+" if sign == "+" else ""
    u = unit.strip()
    if u == "%":
        return f"{plus}{comma}.{decimals}%", 1.0, ""
    if u in ("MiB", "GiB"):
        return f"{plus}{comma}.{decimals}f", 1.0, u.lower()
    return f"{plus}{comma}.{decimals}f", 1.0, ""


def candidates(printed: tuple[str, str, str, str], sources: dict[str, object]) -> list[tuple[str, str]]:
    """(placeholder body, path) for each field that prints exactly as ``printed``."""
    sign, whole, frac, unit = printed
    spec, _, filt = spec_for(sign, whole, frac, unit)
    target = f"{'+' if sign == '+' else ''}{whole}{frac}{unit.strip() if unit.strip() == '%' else ''}"
    out = []
    for alias, data in sources.items():
        for path, v in leaves(data):
            for neg in (False, True):
                x = -v if neg else v
                x = x / 2**20 if filt == "mib" else x / 2**30 if filt == "gib" else x
                try:
                    text = format(x, spec)
                except ValueError:
                    continue
                minus = sign == "−"
                if (minus and text == "-" + target.lstrip("−")) or (not minus and text == target):
                    if neg != (sign in "-−" and sign != "") and not minus:
                        continue
                    body = f"{alias}:{path}" + (" | neg" if neg and not minus else "") + \
                        (f" | {filt}" if filt else "") + f" | {spec}" + (" | minus" if minus else "")
                    out.append((body, path))
    return out


def significant(whole: str, frac: str) -> int:
    return len((whole.replace(",", "") + frac[1:]).lstrip("0"))


def alias_for(rel: str, taken: set[str]) -> str:
    """A readable alias for a result file: its folder's name (``dejavu-relu-8l`` -> ``dejavu_relu_8l``)."""
    path = Path(rel)
    base = re.sub(r"\W", "_", path.parent.name) or "r"
    name = base if path.stem in ("metrics", "result") else f"{base}_{re.sub(r'[^A-Za-z0-9]', '_', path.stem)}"
    name = name if name[0].isalpha() else f"r_{name}"
    while name in taken:
        name += "_"
    return name


def declare_markers(text: str) -> str:
    """``<!-- use ... -->`` lines, at the top, for the JSON files the results markers cite and no use names."""
    declared = {p for _, p in USE.findall(text)}
    taken = {a for a, _ in USE.findall(text)}
    lines = []
    for r in RESULTS.finditer(text):
        for f in (f.strip() for f in r.group(1).split(",")):
            if f.endswith(".json") and f not in declared and ":" not in r.group(1):
                declared.add(f)
                taken.add(alias := alias_for(f, taken))
                lines.append(f"<!-- use {alias} = {f} -->")
    return "\n".join(lines) + "\n" + text if lines else text


def scan(text: str, root: Path):
    """(match, candidates) for each hand-typed decimal number in a template: a number in a table under a
    results marker is looked up in that marker's files, any other in every file the template names."""
    aliases = {a: root / p for a, p in USE.findall(text)}
    by_path = {p: a for a, p in aliases.items()}
    loaded: dict = {}

    def load(p: Path):
        if p not in loaded:
            loaded[p] = json.loads(p.read_text()) if p.suffix == ".json" and p.is_file() else {}
        return loaded[p]

    skip = [(m.start(), m.end()) for m in SKIP.finditer(text)]
    markers = list(RESULTS.finditer(text))
    for m in NUMBER.finditer(text):
        if any(a <= m.start() < b for a, b in skip):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        in_table = text[line_start:].lstrip().startswith("|")
        above = [r for r in markers if r.end() <= m.start() and text.count("\n", r.end(), m.start()) < 60]
        files = [root / f.strip() for f in above[-1].group(1).split(",")] if above and in_table else []
        names = [by_path[f] for f in files if f in by_path] or list(aliases)
        yield m, candidates(m.groups(""), {a: load(aliases[a]) for a in names})


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m attnlab.experiments.render_bind", description=__doc__.split("\n\n")[0])
    p.add_argument("template", type=Path)
    p.add_argument("--root", type=Path, default=Path("."))
    p.add_argument("--write", action="store_true", help="bind the unambiguous numbers in the template")
    args = p.parse_args(argv)
    if not args.template.is_file():
        print(f"error: no template {args.template}", file=sys.stderr)
        return 2
    text = declare_markers(args.template.read_text())
    edits = []
    for m, cands in scan(text, args.root):
        line = text.count("\n", 0, m.start()) + 1
        paths = sorted({c[1] for c in cands}, key=lambda s: (s.count(".") + s.count("["), len(s)))
        sig = significant(m.group(2), m.group(3))
        if cands and sig >= 3:
            best = next(c for c in cands if c[1] == paths[0])
            edits.append((m.start(), m.end(), "{{ " + best[0] + " }}"))
            more = f"  (also {len(paths) - 1} more)" if len(paths) > 1 else ""
            print(f"{line}: {m.group(0)!r} -> {best[0]}{more}")
        else:
            why = "no field prints as it" if not cands else f"{sig} significant digits, {len(paths)} fields"
            print(f"{line}: {m.group(0)!r} left: {why}" + (f": {', '.join(paths[:4])}" if cands else ""))
    if args.write:
        for a, b, rep in sorted(edits, reverse=True):
            text = text[:a] + rep + text[b:]
        args.template.write_text(text)
    print(f"{len(edits)} bound" + ("" if args.write else " (dry run: --write to bind)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
