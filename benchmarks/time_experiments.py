"""Wall time of registered experiments in full and quick mode, one after another in one process.

    python benchmarks/time_experiments.py joma-invariants joma-linear joma-nonlinear joma-hierarchy

Each run goes through `attnlab reproduce` into a temporary folder; the time is the run's own
(``seconds`` in its metrics.json: the experiment, not the process start or imports).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from attnlab import cli
from attnlab.experiments.registry import EXPERIMENTS, load_all

from host import add_out, machine, one_of, parser, recorded  # benchmarks/host.py


def _experiments():
    load_all()
    return EXPERIMENTS


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("names", nargs="+", type=one_of(_experiments, "experiment"),
                   help="experiment names (see `attnlab list`)")
    p.add_argument("--modes", type=one_of(("full", "quick"), "mode", many=True), default="full,quick",
                   help="comma-separated: full, quick (default both)")
    add_out(p)
    args = p.parse_args(argv)
    with recorded(args.out, figures := {}):
        figures["rows"] = timed(args.names, list(args.modes))
    return 0


def timed(names: list[str], modes: list[str]) -> list[dict]:
    """Each experiment in each mode through `attnlab reproduce`; its table printed."""
    print(f"# {machine()}", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for mode in modes:
                out = Path(tmp) / f"{name}-{mode}"
                code = cli.main(["reproduce", name, "--out", str(out)] + (["--quick"] if mode == "quick" else []))
                if code != 0:
                    raise SystemExit(code)
                m = json.loads((out / "metrics.json").read_text())
                held = sum(c["holds"] for c in m["claims"])
                rows.append({"experiment": name, "mode": mode, "seconds": m["seconds"],
                             "claims_hold": held, "claims": len(m["claims"])})
    print("\n| experiment | mode | wall time | claims holding |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['experiment']} | {r['mode']} | {r['seconds']:.1f} s | {r['claims_hold']}/{r['claims']} |")
    return rows


if __name__ == "__main__":
    sys.exit(main())
