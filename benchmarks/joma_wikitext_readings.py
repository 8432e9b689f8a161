"""How long does JoMA's partial recovery need, and does the depth ordering hold over seeds? (issue 38, item 2)

Reads ``joma-wikitext`` runs made with ``--set readings=...`` (each run: one or more depths, one seed; a depth's
run does not depend on the others trained beside it, so single-depth runs compose) and tabulates, per seed and
depth, at every reading: the share of the layer-0 entropy drop regained (the claim: 10% to 100%) and the last
layer's entropy (the claim: it rises with depth); then, per reading, how many seeds meet each claim, and the
spread over seeds. The claims themselves are the experiment's, unchanged; this only reads them at more steps.

    python benchmarks/joma_wikitext_readings.py benchmarks/results/joma-wikitext-{1,2,5}L-6k \\
        benchmarks/results/joma-wikitext-{1,2,5}L-seed1-6k --out benchmarks/results/joma-wikitext-readings
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from attnlab.train.exp_joma_text import meets_recovery

from host import add_out, recorded  # benchmarks/host.py


def load(folders: list[Path]) -> tuple[dict, dict, float, list[str]]:
    """{(seed, depth): {reading: {"recovered", "last_layer"}}}, {(seed, depth): the first reading meeting the
    claim, as the run found it}, the claim's lower bound, and the readings."""
    cells, first, share, readings = {}, {}, None, None
    for folder in folders:
        cfg = json.loads((folder / "config.json").read_text())
        runs = json.loads((folder / "metrics.json").read_text())["runs"]
        share = cfg["recovery_fraction"]
        for depth, run in runs.items():
            if "by_step" not in run:
                raise SystemExit(f"{folder}: run without readings; rerun it with --set readings=3000,...,6000")
            if readings is not None and list(run["by_step"]) != readings:
                raise SystemExit(f"{folder}: read at {list(run['by_step'])}, the others at {readings}; rerun it with "
                                 f"--set readings={','.join(readings)}")
            cells[(cfg["seed"], int(depth))] = run["by_step"]
            first[(cfg["seed"], int(depth))] = run["recovery_reached_at"]
            readings = readings or list(run["by_step"])
    return cells, first, share, readings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="joma-wikitext result folders")
    add_out(p)
    args = p.parse_args()
    figures: dict = {}
    with recorded(args.out, figures):
        cells, firsts, share, readings = load(args.runs)
        seeds, depths = sorted({s for s, _ in cells}), sorted({d for _, d in cells})
        print(f"Layer-0 recovery (share of the drop regained; claim {share:.0%} to 100%) and last-layer entropy, "
              f"by step, for seeds {seeds} and depths {depths}.\n")
        ends = sorted({readings[0], readings[-1]}, key=int)  # the last layer at the first and the last reading
        print("| seed | layers | " + " | ".join(f"recovered @ {r}" for r in readings) + " | first meeting the claim | "
              + " | ".join(f"last layer @ {r}" for r in ends) + " |")
        print("|---:|---:|" + "---:|" * (len(readings) + 1 + len(ends)))
        table = {}
        for (seed, depth), by in sorted(cells.items()):
            rec = [by[r]["recovered"] for r in readings]
            first = firsts[(seed, depth)]
            table[f"seed{seed}-{depth}L"] = {"recovered": [round(v, 4) for v in rec], "first_meeting_claim": first,
                                             "last_layer": [round(by[r]["last_layer"], 3) for r in readings]}
            print(f"| {seed} | {depth} | " + " | ".join(f"{v:.1%}" for v in rec) + f" | {first or 'none'} | "
                  + " | ".join(f"{by[r]['last_layer']:.3f}" for r in ends) + " |")
        print("\nPer reading: seeds meeting the recovery claim at each depth; last-layer entropy rising with depth "
              "(pairs in order, of " + str(len(depths) - 1) + ").\n")
        print("| step | " + " | ".join(f"{d}L recovery (mean, range)" for d in depths) + " | "
              + " | ".join(f"seed {s}: pairs in order" for s in seeds) + " |")
        print("|---:|" + "---|" * len(depths) + "---:|" * len(seeds))
        by_reading = {}
        for r in readings:
            rec = {d: [cells[(s, d)][r]["recovered"] for s in seeds if (s, d) in cells] for d in depths}
            meet = {d: sum(meets_recovery(x, share) for x in v) for d, v in rec.items()}
            pairs = {}
            for s in seeds:
                last = [cells[(s, d)][r]["last_layer"] for d in depths if (s, d) in cells]
                pairs[s] = sum(a < b for a, b in zip(last, last[1:])) if len(last) == len(depths) else None
            by_reading[r] = {"recovered_mean": {d: round(float(np.mean(v)), 4) for d, v in rec.items()},
                             "seeds_meeting": meet,
                             "pairs_in_order": pairs}
            print(f"| {r} | " + " | ".join(
                f"{np.mean(v):.1%} ({min(v):.1%} to {max(v):.1%}; {meet[d]}/{len(v)} meet)" for d, v in rec.items())
                + " | " + " | ".join(f"{pairs[s]}" for s in seeds) + " |")
        figures.update(runs=[str(f) for f in args.runs], readings=readings, cells=table, by_reading=by_reading)


if __name__ == "__main__":
    main()
