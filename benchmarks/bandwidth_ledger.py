"""The bandwidth ledger over configurations: for each, the bytes one decode step reads, the roofline tokens/s
that sets at this machine's measured copy bandwidth, the measured tokens/s and their ratio (the yield).

Each configuration is one ``attnlab stream`` run (its ledger is in its metrics.json, ``runs.*.ledger``:
``attnlab.core.ledger``), the same text and tokens, one after another, each streamed one token a step (the
full cache too: stream's dense control is one batched forward, no decode, so it is not a row): each weight
scheme (fp32 as loaded, bf16, int8) under each cache (full, sinks, h2o), and TEAL's gathered half under each
scheme. The sinks configurations also stream with ``--compile``, which adds two rows: the full cache's step
compiled over a static cache ("full cache, compiled") and the sinks cache's own steady step compiled ("sinks
256, compiled": eager until its cache is full, as attnlab.kv.steady runs it, so the steps before its budget
filled are eager steps in its mean; the last column, the rate over the stream's last half, is its steady step's).
Every row's roofline is taken at one bandwidth, the best copy rate the stream commands measured (``one_ceiling``).
What no peer's report gives: how far each method's step is from reading its bytes at the memory's speed.

    python benchmarks/bandwidth_ledger.py --out benchmarks/results/bandwidth-ledger
    python benchmarks/bandwidth_ledger.py --tokens 600 --model PATH       # a quicker look
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from attnlab import methods
from attnlab.cli import main as attnlab

from host import add_out, machine, parser, positive_int, recorded  # benchmarks/host.py

# the weights (--method arguments: fp32 is the model as loaded), the caches, and the sparse MLP composed on top
WEIGHTS = {"fp32": [], "bf16": ["bf16"], "int8": ["int8"]}
CACHES = {"full cache": "full", "sinks 256": "sinks:budget=256,positions=original",
          "h2o 256": "h2o:budget=256,positions=original"}
TEAL = "teal:keep=0.5,mode=gather"
COMPILED = "sinks 256"  # streamed with --compile too: the full cache's step and its own, each one compiled graph


class Config(NamedTuple):
    name: str  # the row of its own run
    methods: list[str]  # its --method arguments
    compiled_full: str | None = None  # streamed with --compile: the row of the full cache's compiled step (its
    # own cache's compiled step is the row name + ", compiled")


def configs() -> list[Config]:
    """Every weight scheme under every cache, then TEAL's gathered half under each scheme with sinks (mode=gather
    has no compiled step)."""
    rows = [Config(f"{w}, {c}", wm + [cm], f"{w}, full cache, compiled" if c == COMPILED else None)
            for w, wm in WEIGHTS.items() for c, cm in CACHES.items()]
    return rows + [Config(f"{w}, TEAL 50% gathered, {COMPILED}", wm + [TEAL, CACHES[COMPILED]])
                   for w, wm in WEIGHTS.items()]


CONFIGS = configs()


def least_tokens(configs: list[Config]) -> int:
    """The shortest stream whose last half is every compiled configuration's steady step: twice the length at
    which its cache is full (its budget + 1)."""
    fills = [kv.policy().capacity(1) + 1 for c in configs if c.compiled_full
             for kv in map(methods.parse, c.methods) if kv.kind == "kv"]
    return 2 * max(fills, default=0)


def run(cfg: Config, args, out: Path) -> tuple[dict, float]:
    """The configuration's rows (row name -> its stream run: its own cache's, then, compiled, the full cache's
    and its own cache's compiled steps) and the one copy bandwidth its stream command measured."""
    argv = ["stream", "--model", args.model, "--text", args.text, "--tokens", str(args.tokens), "--out", str(out)]
    argv += [a for m in cfg.methods for a in ("--method", m)] + ["--no-dense"]
    if attnlab(argv + (["--compile"] if cfg.compiled_full else [])) != 0:
        raise SystemExit(f"{cfg.name}: attnlab stream failed")
    runs = json.loads((out / "metrics.json").read_text())["runs"]
    rows = {(cfg.compiled_full if label == "full, compiled" else f"{cfg.name}, compiled"
             if label.endswith(", compiled") else cfg.name): r for label, r in runs.items()}
    if len(rows) != len(runs) or len(rows) != (3 if cfg.compiled_full else 1):
        raise SystemExit(f"{cfg.name}: attnlab stream wrote the runs {list(runs)}, not this configuration's")
    return rows, runs[next(iter(runs))]["ledger"]["bandwidth_bytes_per_s"]


def one_ceiling(rows: list[dict], seen: list[float]) -> dict:
    """Each row's roofline and yield at one bandwidth, the best of the stream commands' own copy measurements
    ``seen`` (one a command; a compiled configuration's three rows share its one): a measurement is a snapshot
    of a shared machine (the same copy, repeated a few seconds apart, varies by tens of percent here), and rows
    whose rooflines moved with it could not be compared. Each row keeps its command's own figure
    (``run_bandwidth_bytes_per_s``). Returns the measurements' spread (bytes/s) and their count."""
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
    if args.tokens < (least := least_tokens(CONFIGS)):
        ap.error(f"--tokens {args.tokens}: the compiled rows need at least {least}, so that the stream's last half "
                 "is their cache's steady step")
    with recorded(args.out, figures := {}), tempfile.TemporaryDirectory() as tmp:
        figures["tokens"] = args.tokens
        rows, seen = [], []  # a row per run; a copy bandwidth per stream command
        figures["rows"] = rows
        for i, cfg in enumerate(CONFIGS):
            runs, bandwidth = run(cfg, args, Path(tmp) / str(i))
            seen.append(bandwidth)
            rows += [{"config": row, **r["ledger"], "late_tokens_per_s": r["late_tokens_per_s"]}
                     for row, r in runs.items()]
        bw = figures["bandwidth"] = one_ceiling(rows, seen)
        print(f"# {machine()}; {args.model}, {args.tokens} tokens of {args.text}, batch 1, one token a step; copy "
              f"bandwidth {bw['best'] / 1e9:.1f} GB/s, the best of the {bw['n']} stream commands' own measurements "
              f"(median {bw['median'] / 1e9:.1f}, lowest {bw['lowest'] / 1e9:.1f})\n")
        print("| configuration | MiB read a token (weights + KV) | roofline tokens/s | measured tokens/s | yield | "
              "tokens/s, last half |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['config']} | {r['bytes_per_token'] / 2**20:.1f} ({r['weight_bytes'] / 2**20:.1f} + "
                  f"{r['kv_bytes'] / 2**20:.1f}) | {r['roofline_tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | "
                  f"{r['yield']:.0%} | {r['late_tokens_per_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
