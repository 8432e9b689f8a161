"""The bandwidth ledger over configurations: for each, the bytes one decode step reads, the roofline tokens/s
that sets at this machine's measured copy bandwidth, the measured tokens/s and their ratio (the yield).

Each configuration is one ``attnlab stream`` run (its ledger is in its metrics.json, ``runs.*.ledger``:
``attnlab.core.ledger``), the same text and tokens, one after another, each streamed one token a step (the
full cache too: stream's dense control is one batched forward, no decode, so it is not a row): each weight
scheme (fp32 as loaded, bf16, int8) under each cache (full, sinks, h2o), and TEAL's gathered half under each
scheme. The sinks configurations also stream with ``--compile``, which adds two rows: the full cache's step
compiled over a static cache ("full cache, compiled") and the sinks cache's own steady step compiled ("sinks
256, compiled": eager until its cache is full, as attnlab.kv.steady runs it, so the first 256 tokens of the
stream are eager steps in its mean).
Every row's roofline is taken at one bandwidth, the best copy rate the runs measured (``one_ceiling``).
What no peer's report gives: how far each method's step is from reading its bytes at the memory's speed.

    python benchmarks/bandwidth_ledger.py --out benchmarks/results/bandwidth-ledger
    python benchmarks/bandwidth_ledger.py --tokens 64 --model PATH        # a quick look
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from attnlab.cli import main as attnlab

from host import add_out, machine, parser, positive_int, recorded  # benchmarks/host.py

# the weights (--method arguments: fp32 is the model as loaded), the caches, and the sparse MLP composed on top
WEIGHTS = {"fp32": [], "bf16": ["bf16"], "int8": ["int8"]}
CACHES = {"full cache": "full", "sinks 256": "sinks:budget=256,positions=original",
          "h2o 256": "h2o:budget=256,positions=original"}
TEAL = "teal:keep=0.5,mode=gather"
COMPILED = "sinks 256"  # streamed with --compile too: the full cache's step and its own, each one compiled graph


def configs() -> list[tuple[str, list[str], bool]]:
    """(name, --method arguments, with --compile): every weight scheme under every cache, then TEAL's gathered
    half under each scheme with sinks (mode=gather has no compiled step)."""
    rows = [(f"{w}, {c}", wm + [cm], c == COMPILED) for w, wm in WEIGHTS.items() for c, cm in CACHES.items()]
    return rows + [(f"{w}, TEAL 50% gathered, {COMPILED}", wm + [TEAL, CACHES[COMPILED]], False)
                   for w, wm in WEIGHTS.items()]


CONFIGS = configs()


def run(name: str, methods: list[str], compiled: bool, args, out: Path) -> dict:
    """The configuration's runs, row name -> its stream run (the own cache's first; with ``compiled``, then the
    full cache's and the own cache's compiled steps)."""
    argv = ["stream", "--model", args.model, "--text", args.text, "--tokens", str(args.tokens), "--out", str(out)]
    argv += [a for m in methods for a in ("--method", m)] + ["--no-dense"] + (["--compile"] if compiled else [])
    if attnlab(argv) != 0:
        raise SystemExit(f"{name}: attnlab stream failed")
    runs = json.loads((out / "metrics.json").read_text())["runs"]
    weights = name.split(", ")[0]
    return {(name if i == 0 else f"{weights}, full cache, compiled" if label == "full, compiled"
             else f"{name}, compiled"): r for i, (label, r) in enumerate(runs.items())}


def one_ceiling(rows: list[dict]) -> dict:
    """Each row's roofline and yield at one bandwidth, the best of the runs' own copy measurements: a run's
    measurement is a snapshot of a shared machine (the same copy, repeated a few seconds apart, varies by tens
    of percent here), and rows whose rooflines moved with it could not be compared. Each run's own figure
    stays in its row (``run_bandwidth_bytes_per_s``). Returns the measurements' spread (bytes/s)."""
    seen = [r["bandwidth_bytes_per_s"] for r in rows]
    best = max(seen)
    for r in rows:
        r["run_bandwidth_bytes_per_s"], r["bandwidth_bytes_per_s"] = r["bandwidth_bytes_per_s"], best
        r["roofline_tokens_per_s"] = best / r["bytes_per_token"]
        r["yield"] = r["tokens_per_s"] / r["roofline_tokens_per_s"]
    return {"best": best, "median": statistics.median(seen), "lowest": min(seen), "n": len(seen)}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", default="smollm2", help="model alias or folder (default smollm2)")
    ap.add_argument("--text", default="kjv", help="the text streamed (default kjv)")
    ap.add_argument("--tokens", type=positive_int, default=1024,
                    help="tokens streamed per configuration (default 1024)")
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out, figures := {}), tempfile.TemporaryDirectory() as tmp:
        figures["tokens"] = args.tokens
        rows = figures["rows"] = []
        for i, (name, methods, compiled) in enumerate(CONFIGS):
            for row, r in run(name, methods, compiled, args, Path(tmp) / str(i)).items():
                rows.append({"config": row, **r["ledger"]})
        bw = figures["bandwidth"] = one_ceiling(rows)
        print(f"# {machine()}; {args.model}, {args.tokens} tokens of {args.text}, batch 1, one token a step; copy "
              f"bandwidth {bw['best'] / 1e9:.1f} GB/s, the best of the {bw['n']} runs' own measurements (median "
              f"{bw['median'] / 1e9:.1f}, lowest {bw['lowest'] / 1e9:.1f})\n")
        print("| configuration | MiB read a token (weights + KV) | roofline tokens/s | measured tokens/s | yield |\n"
              "|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['config']} | {r['bytes_per_token'] / 2**20:.1f} ({r['weight_bytes'] / 2**20:.1f} + "
                  f"{r['kv_bytes'] / 2**20:.1f}) | {r['roofline_tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | "
                  f"{r['yield']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
