"""The bandwidth ledger over configurations: for each, the bytes one decode step reads, the roofline tokens/s
that sets at this machine's measured copy bandwidth, the measured tokens/s and their ratio (the yield).

Each configuration is one ``attnlab stream`` run (its ledger is in its metrics.json, ``runs.*.ledger``:
``attnlab.core.ledger``), the same text and tokens, one after another, each streamed one token a step (the
full cache too: stream's dense control is one batched forward, no decode, so it is not a row).
What no peer's report gives: how far each method's step is from reading its bytes at the memory's speed.

    python benchmarks/bandwidth_ledger.py --out benchmarks/results/bandwidth-ledger
    python benchmarks/bandwidth_ledger.py --tokens 64 --model PATH        # a quick look
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from attnlab.cli import main as attnlab

from host import add_out, machine, parser, positive_int, recorded  # benchmarks/host.py

# (name, --method arguments): fp32 weights unless a scheme is named; bf16 is no method of attnlab's (a model's
# dtype), so it is not a row here
CONFIGS = [
    ("fp32, full cache", ["full"]),
    ("fp32, sinks 256", ["sinks:budget=256,positions=original"]),
    ("fp32, h2o 256", ["h2o:budget=256,positions=original"]),
    ("int8, full cache", ["int8", "full"]),
    ("int8, sinks 256", ["int8", "sinks:budget=256,positions=original"]),
    ("int8, h2o 256", ["int8", "h2o:budget=256,positions=original"]),
    ("fp32, TEAL 50% gathered, sinks 256", ["teal:keep=0.5,mode=gather", "sinks:budget=256,positions=original"]),
    ("int8, TEAL 50% gathered, sinks 256", ["int8", "teal:keep=0.5,mode=gather",
                                             "sinks:budget=256,positions=original"]),
]


def run(name: str, methods: list[str], args, out: Path) -> dict:
    argv = ["stream", "--model", args.model, "--text", args.text, "--tokens", str(args.tokens), "--out", str(out)]
    argv += [a for m in methods for a in ("--method", m)] + ["--no-dense"]
    if attnlab(argv) != 0:
        raise SystemExit(f"{name}: attnlab stream failed")
    return json.loads((out / "metrics.json").read_text())["runs"]


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--model", default="smollm2", help="model alias or folder (default smollm2)")
    ap.add_argument("--text", default="kjv", help="the text streamed (default kjv)")
    ap.add_argument("--tokens", type=positive_int, default=512, help="tokens streamed per configuration (default 512)")
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out, figures := {}), tempfile.TemporaryDirectory() as tmp:
        figures["tokens"] = args.tokens
        rows = figures["rows"] = []
        for i, (name, methods) in enumerate(CONFIGS):
            (own,) = run(name, methods, args, Path(tmp) / str(i)).values()
            rows.append({"config": name, **own["ledger"]})
        bw = rows[0]["bandwidth_bytes_per_s"]
        print(f"# {machine()}; {args.model}, {args.tokens} tokens of {args.text}, batch 1, one token a step; copy "
              f"bandwidth {bw / 1e9:.1f} GB/s (each run measures its own)\n")
        print("| configuration | MiB read a token (weights + KV) | roofline tokens/s | measured tokens/s | yield |\n"
              "|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['config']} | {r['bytes_per_token'] / 2**20:.1f} ({r['weight_bytes'] / 2**20:.1f} + "
                  f"{r['kv_bytes'] / 2**20:.1f}) | {r['roofline_tokens_per_s']:.1f} | {r['tokens_per_s']:.1f} | "
                  f"{r['yield']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
