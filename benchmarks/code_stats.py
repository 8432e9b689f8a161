"""Code shape: files and lines per top-level folder of src/attnlab, and the longest functions.

    python benchmarks/code_stats.py [--src src/attnlab] [--top 10]

Used for the redesign's before/after note; the numbers come from the source alone (ast).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from host import add_out, existing_folder, natural, parser, recorded  # benchmarks/host.py


def functions(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def main(argv=None) -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--src", default="src/attnlab", type=existing_folder)
    ap.add_argument("--top", default=10, type=natural)
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    per_folder = defaultdict(lambda: [0, 0])
    funcs, big_modules = [], []
    for path in sorted(args.src.rglob("*.py")):
        rel = path.relative_to(args.src)
        folder = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        n = len(path.read_text().splitlines())
        per_folder[folder][0] += 1
        per_folder[folder][1] += n
        if n > 300:
            big_modules.append((n, str(rel)))
        funcs += [(length, f"{rel}:{line} {name}") for name, line, length in functions(path)]
    print("| folder | files | lines |\n|---|---|---|")
    for folder, (files, lines) in sorted(per_folder.items()):
        print(f"| {folder} | {files} | {lines} |")
    total = [sum(v[i] for v in per_folder.values()) for i in (0, 1)]
    print(f"| total | {total[0]} | {total[1]} |\n")
    print(f"modules over 300 lines: {len(big_modules)}")
    for n, rel in sorted(big_modules, reverse=True):
        print(f"  {n:4d}  {rel}")
    over = sum(1 for length, _ in funcs if length > 80)
    print(f"\nfunctions over 80 lines: {over}; the {args.top} longest:")
    for length, where in sorted(funcs, reverse=True)[: args.top]:
        print(f"  {length:4d}  {where}")


if __name__ == "__main__":
    main()
