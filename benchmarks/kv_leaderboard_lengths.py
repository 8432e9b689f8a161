"""A kv-leaderboard run's answers split by prompt length: score, decode speed and KV bytes per length.

    python benchmarks/kv_leaderboard_lengths.py benchmarks/results/kv-leaderboard-long \
        --out benchmarks/results/kv-leaderboard-lengths

The run's own table and costs pool every length; this reads its per-answer rows (metrics.json ``answers``)
and keeps them apart: for each length, regime, policy and ratio, the mean score over the items (and n), the
mean decode tokens/s while answering, and the mean KV MiB when the answer began. Nothing is re-run.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict

from host import add_out, existing_folder, parser, recorded  # benchmarks/host.py


def by_length(rows: list[dict]) -> dict:
    """length -> regime -> policy -> ratio -> {score, n, tokens_per_s, kv_mib}."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["length"], r["regime"], r["policy"], f"{r['ratio']:g}")].append(r)
    out: dict = {}
    for (length, regime, policy, ratio), rs in sorted(groups.items()):
        out.setdefault(str(length), {}).setdefault(regime, {}).setdefault(policy, {})[ratio] = {
            "score": sum(r["score"] for r in rs) / len(rs), "n": len(rs),
            "tokens_per_s": sum(r["tokens_per_s"] for r in rs) / len(rs),
            "kv_mib": sum(r["kv_bytes"] for r in rs) / len(rs) / 2**20}
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
