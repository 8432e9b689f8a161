"""How long does JoMA's partial recovery need, and does the depth ordering hold over seeds? (issue 38, item 2)

Reads ``joma-wikitext`` runs made with ``--set readings=...`` -- result folders of ``attnlab reproduce`` or
``attnlab sweep`` folders (their ``cells/*``) -- and tabulates, per seed and depth, the share of the layer-0
entropy drop regained (the claim: 10% to 100%), where layer 0's minimum lies, and the last layer's entropy (the
claim: it rises with depth); then, per reading, how many seeds meet each claim and their spread. A depth's run
does not depend on the others trained beside it (same seed, its own model), so single-depth runs compose; runs
may be read at different steps (a 12,000-step run beside 6,000-step ones): each reading counts the runs read
there. A longer run of a seed and depth replaces the shorter one only if it is that run carried on: the same
settings but length, the same model at step 0, and (with a constant learning rate a prefix of a run is the
shorter run) the same readings -- bit for bit on one machine; on another CPU, which rounds differently from the
first forward pass on, as far as that rounding carries. Each replacement is said, with how far the two agree.
The claims are the experiment's, unchanged; this only reads them at more steps and seeds.

    python benchmarks/joma_wikitext_readings.py benchmarks/results/joma-wikitext-{1,2,5}L-6k \\
        benchmarks/results/joma-wikitext-seeds-6k benchmarks/results/joma-wikitext-5L-12k \\
        benchmarks/results/joma-wikitext-{5,2,1}L-12k-seed{1,2} benchmarks/results/joma-wikitext-{1,2}L-12k-seed0 \\
        --out benchmarks/results/joma-wikitext-readings
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np

from attnlab.core.io import write_atomic
from attnlab.core.plotting import plt
from attnlab.train.exp_joma_text import late_recovery, meets_recovery

from host import add_out, existing_folder, parser, recorded  # benchmarks/host.py

COLUMNS = (3000, 6000, 12000)  # the steps: the per-run table reads there (where a run was read)


def refuse(message: str) -> None:
    """Bad input: one line naming the fix, exit code 2, nothing written (the result is written only at the end)."""
    print(f"joma_wikitext_readings.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_folders(paths: list[Path]) -> list[Path]:
    """Result folders: each path itself, or a sweep folder's cells."""
    out = []
    for path in paths:
        if (path / "config.json").is_file():
            out.append(path)
        elif (path / "cells").is_dir():
            out += sorted(p for p in (path / "cells").iterdir() if (p / "config.json").is_file())
        else:
            refuse(f"{path}: neither a joma-wikitext result folder (config.json) nor a sweep folder "
                   "(cells/); name the folders `attnlab reproduce` or `attnlab sweep` wrote")
    return out


# what may differ between two runs of one seed and depth that one stands for: how far they ran and were read,
# and which other depths trained beside (each depth is its own model)
OWN = {"steps", "readings", "layers", "device"}
ROUNDING = 1e-4  # nats: two step-0 forward passes of one init on different CPU kernels differ by ~1e-7


def load(folders: list[Path]) -> tuple[dict, dict, dict, float, list[str]]:
    """{(seed, depth): {reading step: {"recovered", "min_step", "last_layer", ...}}}, {(seed, depth): the first
    reading meeting the claim, as the run found it}, {(seed, depth): the folder read}, the claim's lower bound,
    and a line per run that a longer run of the same seed and depth replaced."""
    cells, first, source, settings, share, replaced = {}, {}, {}, {}, None, []
    for folder in folders:
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("experiment") != "joma-wikitext":
            refuse(f"{folder}: a {cfg.get('experiment')} run; name joma-wikitext runs")
        runs = json.loads((folder / "metrics.json").read_text())["runs"]
        if share is not None and cfg["recovery_fraction"] != share:
            refuse(f"{folder}: recovery_fraction {cfg['recovery_fraction']}, the others {share}; "
                   "compare runs of one claim")
        share = cfg["recovery_fraction"]
        for depth, run in runs.items():
            if "by_step" not in run:
                refuse(f"{folder}: run without readings; rerun it with --set readings=3000,...,6000")
            if not (folder / f"layers{depth}" / "metrics.jsonl").is_file():
                refuse(f"{folder}: no layers{depth}/metrics.jsonl (the curves); copy the run's whole folder")
            key, by = (cfg["seed"], int(depth)), {int(s): r for s, r in run["by_step"].items()}
            if key in cells:
                replaced.append(longer_of(key, (source[key], settings[key], cells[key]), (folder, cfg, by)))
                if max(cells[key]) > max(by):
                    continue
            cells[key], first[key], source[key], settings[key] = by, run["recovery_reached_at"], folder, cfg
    return cells, first, source, share, replaced


def longer_of(key: tuple[int, int], a: tuple[Path, dict, dict], b: tuple[Path, dict, dict]) -> str:
    """Two runs of one seed and depth: the longer stands for both if it is the shorter run carried on -- the
    same settings but length, and the same readings where both read (with a constant learning rate a run's
    prefix *is* the shorter run). On another CPU the same run rounds differently from its first forward pass
    on, and training carries that on: then the readings agree only as far as that goes, which is said, with
    the step-0 difference that shows it; -> the line saying which replaced which."""
    (short, s_cfg, s_by), (long, l_cfg, l_by) = sorted((a, b), key=lambda r: max(r[2]))  # (folder, config, readings)
    cfg = [{k: v for k, v in c.items() if k not in OWN} for c in (s_cfg, l_cfg)]
    common = sorted(set(s_by) & set(l_by))
    start = np.abs(step0(short, key[1]) - step0(long, key[1])).max()
    why = ("neither extends the other" if not common or max(s_by) == max(l_by) else
           f"their settings differ beyond length ({sorted(k for k in cfg[0] if cfg[0][k] != cfg[1].get(k))})"
           if cfg[0] != cfg[1] else
           f"they start from different models (step-0 entropy differs by {start:.2g} nats)" if start > ROUNDING
           else None)
    if why:
        refuse(f"seed {key[0]}, {key[1]} layer(s) given twice ({short}, {long}): {why}; name each run once")
    gap = max(abs(s_by[t]["recovered"] - l_by[t]["recovered"]) for t in common)
    parted = (f"from step 0 on (its entropies differ by up to {start:.1g} nats: one init" if start else
              "after step 0 (its entropies agree: one init")
    same = ("exactly" if all(s_by[t] == l_by[t] for t in common) else
            f"to within {100 * gap:.2f} points of the share regained, not bit for bit: the two round differently "
            f"{parted}, rounded differently, as another CPU's kernels do)")
    return (f"seed {key[0]}, {key[1]} layer(s): {long} (to {max(l_by)}) replaces {short} (to {max(s_by)}), "
            f"whose {len(common)} readings it repeats {same}")


def step0(folder: Path, depth: int) -> np.ndarray:
    """The run's per-layer entropies at step 0: the untrained model's first forward pass."""
    with open(folder / f"layers{depth}" / "metrics.jsonl") as f:
        return np.array(json.loads(f.readline())["entropy"], dtype=float).ravel()


def late(curve: tuple[list, list], step: int, reading: dict) -> dict:
    """:func:`late_recovery` of a run's layer-0 curve cut at a reading's step, over its last 1,000 steps."""
    steps, h = np.array(curve[0]), np.array(curve[1])
    keep = steps <= step
    return late_recovery(steps[keep], h[keep], reading, 1000)


def per_run_table(cells: dict, firsts: dict, curves: dict, valid: dict) -> dict:
    """Print one row per (seed, depth) at the COLUMNS steps, and at its last reading where layer 0's minimum
    lies, how the share regained moves over the last 1,000 steps, and where validation loss was lowest (past
    it the model overfits its small training text); -> the rows as data."""
    cols = [c for c in COLUMNS if any(c in by for by in cells.values())]
    print("| seed | layers | " + " | ".join(f"recovered @ {c}" for c in cols) + " | first meeting the claim | "
          "layer-0 minimum at step | last 1,000 steps: recovered, mean ± sd | its slope per 1,000 steps | "
          + " | ".join(f"last layer @ {c}" for c in cols) + " | valid loss: lowest (step) -> last |")
    print("|---:|---:|" + "---:|" * (2 * len(cols) + 5))
    rows = {}
    for (seed, depth), by in sorted(cells.items()):
        last = max(by)
        end = late(curves[(seed, depth)], last, by[last])
        rows[f"seed{seed}-{depth}L"] = {
            "recovered": {c: round(by[c]["recovered"], 4) for c in cols if c in by},
            "first_meeting_claim": firsts[(seed, depth)], "last_reading": last, "min_step": by[last]["min_step"],
            "late": {k: round(v, 4) for k, v in end.items()},
            "last_layer": {c: round(by[c]["last_layer"], 3) for c in cols if c in by}, "valid": valid[(seed, depth)]}
        v = valid[(seed, depth)]
        print(f"| {seed} | {depth} | " + " | ".join(f"{by[c]['recovered']:.1%}" if c in by else "—" for c in cols)
              + f" | {firsts[(seed, depth)] or 'none'} | {by[last]['min_step']} (of {last}) | "
              + f"{end['mean']:.1%} ± {end['sd']:.1%} | {end['slope_per_1000']:+.1%} | "
              + " | ".join(f"{by[c]['last_layer']:.3f}" if c in by else "—" for c in cols)
              + f" | {v['lowest']:.3f} ({v['at']}) -> {v['last']:.3f} |")
    return rows


def per_reading_table(cells: dict, share: float) -> dict:
    """Print one row per reading: per depth the seeds' recovery (mean, range, how many meet the claim), per
    seed the last-layer pairs in order; -> the rows as data."""
    seeds, depths = sorted({s for s, _ in cells}), sorted({d for _, d in cells})
    print("| step | " + " | ".join(f"{d}L recovery (mean, range; seeds meeting)" for d in depths) + " | "
          + " | ".join(f"seed {s}: pairs in order" for s in seeds) + " |")
    print("|---:|" + "---|" * len(depths) + "---:|" * len(seeds))
    rows = {}
    for r in sorted({r for by in cells.values() for r in by}):
        rec = {d: [cells[(s, d)][r]["recovered"] for s in seeds if r in cells.get((s, d), {})] for d in depths}
        meet = {d: sum(meets_recovery(x, share) for x in v) for d, v in rec.items()}
        pairs = {}
        for s in seeds:
            last = [cells[(s, d)][r]["last_layer"] for d in depths if r in cells.get((s, d), {})]
            pairs[s] = sum(a < b for a, b in zip(last, last[1:])) if len(last) == len(depths) else None
        rows[r] = {"recovered_mean": {d: round(float(np.mean(v)), 4) for d, v in rec.items() if v},
                   "seeds_meeting": {d: f"{meet[d]}/{len(v)}" for d, v in rec.items() if v},
                   "pairs_in_order": pairs}
        print(f"| {r} | " + " | ".join(
            f"{np.mean(v):.1%} ({min(v):.1%} to {max(v):.1%}; {meet[d]}/{len(v)})" if v else "—"
            for d, v in rec.items()) + " | " + " | ".join("—" if pairs[s] is None else f"{pairs[s]}" for s in seeds)
            + " |")
    return rows


def read_curves(source: dict) -> tuple[dict, dict]:
    """From each run's layers<L>/metrics.jsonl: {(seed, depth): (steps, layer-0 entropy)} and {(seed, depth):
    the lowest validation loss, its step, and the last}."""
    curves, valid = {}, {}
    for (seed, depth), folder in source.items():
        text = (folder / f"layers{depth}" / "metrics.jsonl").read_text()
        lines = [json.loads(line) for line in text.splitlines()]
        curves[(seed, depth)] = ([x["step"] for x in lines], [float(np.mean(x["entropy"][0])) for x in lines])
        loss = [(x["valid_loss"], x["step"]) for x in lines if "valid_loss" in x]
        lowest, at = min(loss)
        valid[(seed, depth)] = {"lowest": round(lowest, 4), "at": at, "last": round(loss[-1][0], 4)}
    return curves, valid


def figure(cells: dict, curves: dict, valid: dict, share: float, path: Path) -> None:
    """Left: layer-0 entropy over training, one line per run. Right: the recovered share at each reading, the
    claim's band shaded. Colour: depth; seed 0 drawn solid, other seeds fainter. A dotted line in both: the
    median step of lowest validation loss (past it the runs overfit)."""
    depths = sorted({d for _, d in cells})
    fig, (ax_h, ax_r) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax_r.axhspan(share, 1, color="0.9", label=f"claim: {share:.0%} to 100% of the drop")
    for (seed, depth), by in sorted(cells.items()):
        style = {"color": f"C{depths.index(depth)}", "alpha": 0.95 if seed == 0 else 0.55,
                 "label": f"{depth} layer(s)" if seed == min(s for s, d in cells if d == depth) else None}
        if (seed, depth) in curves:
            ax_h.plot(*curves[(seed, depth)], lw=1, **style)
        steps = sorted(by)
        ax_r.plot(steps, [by[s]["recovered"] for s in steps], "-o", ms=3, **style)
    ax_h.set(xlabel="step", ylabel="layer-0 attention entropy (nats, probe batch)",
             title="layer 0: the sharp drop, then the partial recovery")
    low = min(0, *(r["recovered"] for by in cells.values() for r in by.values())) - 0.02
    ax_r.set(xlabel="step (the run read as if it stopped there)", ylabel="share of layer-0 entropy drop regained",
             ylim=(low, 0.5), title="recovered share by step, depth and seed")
    ax_r.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    best = float(np.median([v["at"] for v in valid.values()]))
    for ax in (ax_h, ax_r):
        ax.axvline(best, ls=":", color="0.35", label=f"lowest valid loss (median step, {best:.0f})")
        ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=120, format="png", bbox_inches="tight")
    plt.close(fig)
    write_atomic(path, buf.getvalue())


def main(argv=None) -> None:
    p = parser(__doc__)
    p.add_argument("runs", nargs="+", type=existing_folder, help="joma-wikitext result folders, or sweep folders")
    add_out(p)
    args = p.parse_args(argv)
    figures: dict = {}
    with recorded(args.out, figures):
        folders = run_folders(args.runs)
        cells, firsts, source, share, replaced = load(folders)
        seeds, depths = sorted({s for s, _ in cells}), sorted({d for _, d in cells})
        print(f"Layer-0 recovery (share of the drop regained; claim {share:.0%} to 100%) and last-layer entropy, "
              f"for seeds {seeds} and depths {depths} ({len(folders)} result folders).\n")
        if replaced:
            print("\n".join(f"- {line}" for line in replaced) + "\n")
        curves, valid = read_curves(source)
        runs = per_run_table(cells, firsts, curves, valid)
        print("\nPer reading: the seeds' layer-0 recovery at each depth (mean, range, seeds meeting the claim); "
              f"last-layer entropy rising with depth (pairs in order, of {len(depths) - 1}; — where a seed lacks a "
              "depth at that step).\n")
        by_reading = per_reading_table(cells, share)
        figures.update(runs=[str(f) for f in folders], replaced=replaced, cells=runs, by_reading=by_reading)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            figure(cells, curves, valid, share, args.out / "joma_wikitext_readings.png")
            figures["figure"] = "joma_wikitext_readings.png"


if __name__ == "__main__":
    main()
