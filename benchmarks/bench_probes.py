"""Probe streaming cost: wall time and peak RSS of streaming 2k, 8k and 16k tokens of War and Peace through
SmolLM2 with the attention probes (sinks, and heavy-hitters where registered), in chunks with the KV cache.

Each length runs in a fresh subprocess, so its peak RSS (``resource.getrusage``'s ``ru_maxrss``) is its own
and not the largest length's so far. Reported per length: the stream's wall time (model loading and
tokenising excluded) and tokens/s; peak RSS after loading the model and text and one 8-token forward (the
floor: a memory-mapped checkpoint's weights are resident only once a forward has read them) and after the
stream; their difference is what streaming added: the KV cache (23 KB per token for SmolLM2-135M) plus one
chunk's eager attention (the scores, the probabilities: chunk x (start + chunk) x 9 heads floats each, the
largest at the last chunk), plus the probes' per-key accumulators.

    OMP_NUM_THREADS=1 python benchmarks/bench_probes.py --lengths 2048          # ~1 min on one core
    OMP_NUM_THREADS=1 python benchmarks/bench_probes.py                         # 2k, 8k, 16k
    python benchmarks/bench_probes.py --probes sinks --chunk 256 --lengths 16384
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from host import (  # benchmarks/host.py
    add_out,
    corpus,
    model_name,
    natural,
    one_of,
    parser,
    peak_rss_mib,
    positive_int,
    positive_ints,
    recorded,
)

ATTENTION_PROBES = ("sinks", "heavy-hitters")


def child(args) -> dict:
    """One length in this process: load, stream, measure."""
    import torch

    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.probes.base import make_probes
    from attnlab.probes.stream import stream

    names = list(args.probes)  # checked (and the probes registered) by the parser
    model, tok = load_model(args.model)
    ids = text_ids(tok, args.text, args.child)
    probes = make_probes(names)
    with torch.no_grad():  # the weights may be memory-mapped: touch them all, so the floor counts them
        model(ids[None, :8])
    floor = peak_rss_mib()
    t0 = time.perf_counter()
    stream(model, ids, probes, args.chunk)
    seconds = time.perf_counter() - t0
    for p in probes:
        p.result()
    peak = peak_rss_mib()
    return {"tokens": int(ids.numel()), "chunk": args.chunk, "probes": names, "threads": torch.get_num_threads(),
            "seconds": round(seconds, 2), "tokens_per_s": round(ids.numel() / seconds, 1),
            "rss_floor_mb": round(floor), "peak_rss_mb": round(peak), "stream_added_mb": round(peak - floor)}


def _probes():
    from attnlab.probes.base import PROBES
    from attnlab.probes.run import load_probes

    load_probes()
    return PROBES


def main(argv=None) -> None:
    p = parser(__doc__)
    p.add_argument("--lengths", type=positive_ints, default="2048,8192,16384", help="comma-separated token counts")
    p.add_argument("--probes", type=one_of(_probes, "probe", many=True), default=",".join(ATTENTION_PROBES),
                   help="probes to run (those registered)")
    p.add_argument("--model", type=model_name, default="smollm2")
    p.add_argument("--text", type=corpus(), default="war-and-peace")
    p.add_argument("--chunk", type=positive_int, default=512)
    p.add_argument("--child", type=natural, default=0, help=argparse.SUPPRESS)  # one length, in this process
    add_out(p)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    print("| tokens | probes | chunk | stream s | tokens/s | RSS floor MB | peak RSS MB | added MB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in args.lengths:
        done = subprocess.run([sys.executable, __file__, "--child", str(n), "--probes", ",".join(args.probes),
                               "--model", args.model, "--text", args.text, "--chunk", str(args.chunk)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{n} tokens failed:\n{done.stderr[-2000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {r['tokens']} | {','.join(r['probes'])} | {r['chunk']} | {r['seconds']} | {r['tokens_per_s']} | "
              f"{r['rss_floor_mb']} | {r['peak_rss_mb']} | {r['stream_added_mb']} |", flush=True)


if __name__ == "__main__":
    main()
