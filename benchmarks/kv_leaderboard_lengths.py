"""A kv-leaderboard run's answers split by prompt length: score, decode speed and KV bytes per length.

    python benchmarks/kv_leaderboard_lengths.py benchmarks/results/kv-leaderboard-long \
        --out benchmarks/results/kv-leaderboard-lengths

The run's own table and costs pool every length; this reads its per-answer rows (metrics.json ``answers``)
and keeps them apart: for each length, regime, policy and ratio, the leaderboard's mean score (over the tasks;
n answers), its mean decode tokens/s while answering and KV MiB when the answer began. Nothing is re-run.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

from attnlab.leaderboard.board import costs, table

from host import add_out, existing_folder, parser, recorded  # benchmarks/host.py


def by_length(rows: list[dict]) -> dict:
    """length -> regime -> policy -> ratio -> {score, n, tokens_per_s, kv_mib}: the leaderboard's own table
    (its mean score over the tasks) and costs, over each length's answers alone."""
    out: dict = {}
    for length in sorted({r["length"] for r in rows}):
        rs = [r for r in rows if r["length"] == length]
        scored, n = table(rs), Counter((r["regime"], r["policy"], f"{r['ratio']:g}") for r in rs)
        for regime, policies in costs(rs).items():
            for policy, ratios in policies.items():
                for ratio, c in ratios.items():
                    out.setdefault(str(length), {}).setdefault(regime, {}).setdefault(policy, {})[ratio] = {
                        "score": scored[regime][policy][ratio]["average"], "n": n[regime, policy, ratio],
                        "tokens_per_s": c["tokens_per_s"], "kv_mib": c["kv_bytes"] / 2**20}
    return out


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("run", type=existing_folder, help="a kv-leaderboard run folder (its metrics.json)")
    add_out(ap)
    args = ap.parse_args(argv)
    path = args.run / "metrics.json"
    try:
        metrics = json.loads(path.read_text())
        rows = metrics["answers"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        ap.error(f"{path}: not a kv-leaderboard run's metrics ({type(e).__name__}: {e}); give the folder "
                 "`attnlab reproduce kv-leaderboard --out DIR` wrote")
    with recorded(args.out, figures := {"run": metrics.get("command"), "machine_of_run": metrics.get("machine")}):
        figures["lengths"] = table = by_length(rows)
        print(f"from `{metrics.get('command')}` on {metrics.get('machine')}\n")
        print("| length | regime | policy | ratio | score (n) | decode tokens/s | KV MiB |")
        print("|---|---|---|---|---|---|---|")
        for length, regimes in table.items():
            for regime, policies in regimes.items():
                for policy, ratios in policies.items():
                    for ratio, c in ratios.items():
                        print(f"| {length} | {regime} | {policy} | {ratio} | {c['score']:.2f} ({c['n']}) | "
                              f"{c['tokens_per_s']:.1f} | {c['kv_mib']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
