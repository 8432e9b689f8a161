"""Is the rise of sinks' NLL late in the 16k-token KJV stream the cache or the text?

streaming-ppl's long stream shows sinks+window's PPL past token 8,192 well above its PPL before.
Here both a dense cache and sinks+window are *restarted* at token 8,192, so neither ever sees a
position past the model's context: if they rise over the same stretch, the text is harder there.
Prints the PPL of each 1,024-token block and the sinks / dense ratio per block.

    python benchmarks/stream_restart.py        # SmolLM2, KJV tokens 8,192..16,384; ~8 min on 2 CPU cores
"""
from __future__ import annotations

import math

from attnlab.evals.inputs import load_stream
from attnlab.evals.streaming import stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy

from host import add_out, corpus, kv_budget, model_name, natural, parser, positive_int, recorded  # benchmarks/host.py


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--text", type=corpus(), default="kjv")
    ap.add_argument("--start", type=natural, default=8192)
    ap.add_argument("--tokens", type=positive_int, default=16384)
    ap.add_argument("--budget", type=kv_budget("sinks"), default=256)
    add_out(ap)
    args = ap.parse_args(argv)
    if args.start >= args.tokens - 1:  # the restarted streams score the tokens after --start
        ap.error(f"--start {args.start}, --tokens {args.tokens}: need --start below --tokens - 1")
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    model, ids = load_stream(args.model, args.text, args.tokens)
    part = ids[args.start:]
    dense = stream_nll(model, part, PolicyCache(model, make_policy("full")), 256).nll
    sinks = stream_nll(model, part, PolicyCache(model, make_policy("sinks", budget=args.budget, n_sink=4), "rolling"),
                       1).nll
    print(f"# {args.model}, {args.text} tokens {args.start}..{args.tokens}, both caches restarted at {args.start}")
    print("| block (stream index) | dense PPL | sinks 4+252 PPL | sinks / dense |")
    print("|---|---|---|---|")
    for a in range(0, len(dense), 1024):
        d, s = (math.exp(float(x[a:a + 1024].mean())) for x in (dense, sinks))
        print(f"| {args.start + a + 1}..{args.start + min(a + 1024, len(dense))} | {d:.2f} | {s:.2f} | {s / d:.2f} |")


if __name__ == "__main__":
    main()
