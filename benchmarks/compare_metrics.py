"""Behaviour check for refactors: two run trees must hold the same metrics.json, experiment by experiment.

    python benchmarks/compare_metrics.py BEFORE_DIR AFTER_DIR

Every ``metrics.json`` below BEFORE_DIR is compared with the one at the same relative path below
AFTER_DIR. Timing and version fields are ignored, and so are keys that only AFTER has from the
claim-status redesign (``status``, ``claim_counts``, ``corrected``, ``note``). Everything else must be
equal -- floats exactly. Exit 0 when all match, 1 otherwise (each difference printed); 2, in one line, when a
folder does not exist or BEFORE_DIR holds no metrics.json (nothing compared is no evidence of sameness).
"""
from __future__ import annotations

import json
import sys

from host import existing_folder, parser  # benchmarks/host.py

IGNORED = {"seconds", "wall_seconds", "attnlab_version", "torch_version", "tokens_per_s", "time_s"}
NEW_KEYS = {"status", "claim_counts", "corrected", "note"}


def diff(a, b, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in IGNORED or (k in NEW_KEYS and k not in a) or "second" in k or k.endswith("_s"):
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'after' if k in b else 'before'}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} -> {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b and not (a != a and b != b):  # NaN == NaN here
        out.append(f"{path}: {a!r} -> {b!r}")


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("before", type=existing_folder, help="the run tree before (BEFORE_DIR)")
    ap.add_argument("after", type=existing_folder, help="the run tree after (AFTER_DIR)")
    args = ap.parse_args(argv)
    before, after = args.before, args.after
    found_before = sorted(before.rglob("metrics.json"))
    if not found_before:
        ap.error(f"{before} holds no metrics.json: give a folder of runs (attnlab reproduce/sweep --out)")
    problems, n = [], 0
    for fa in found_before:
        rel = fa.relative_to(before)
        fb = after / rel
        if not fb.exists():
            problems.append(f"{rel}: missing after")
            continue
        n += 1
        found: list[str] = []
        diff(json.loads(fa.read_text()), json.loads(fb.read_text()), str(rel.parent), found)
        problems += found
    for p in problems:
        print(p)
    print(f"{n} metrics.json compared: {'identical' if not problems else f'{len(problems)} differences'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
