"""Wall time of one passkey grid cell and one long-context perplexity window, by prompt length.

A passkey cell is one prefill of the whole prompt (one forward, last-position logits only) plus
10 greedy decode steps; a perplexity window is one forward scoring 256 positions. Timed without
scaling: a scaling changes only the rotary frequencies (32 numbers), not the work (dynamic NTK's
per-length forwards multiply the number of windows, not the cost of one). Peak memory is the
process's maximum resident set after each length.

    python benchmarks/bench_long_context.py                          # SmolLM2, 4k, 8k, 16k
    python benchmarks/bench_long_context.py --lengths 4096 --device cuda
"""
from __future__ import annotations

import time

import torch

from attnlab.evals.inputs import text_ids
from attnlab.evals.longppl import scored_nll
from attnlab.evals.passkey import PasskeyPrompts, passkey_cases, retrieve
from attnlab.models.pretrained import load_model_and_tokenizer

from host import add_out, corpus, device, model_name, numbers, parser, peak_rss_mib, recorded  # benchmarks/host.py


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--model", type=model_name, default="smollm2")
    ap.add_argument("--text", type=corpus(), default="war-and-peace")
    ap.add_argument("--lengths", type=numbers(int, "> 256"), default="4096,8192,16384",
                    help="prompt tokens, each over the 256 the PPL window scores")
    ap.add_argument("--device", type=device, default="cpu")
    add_out(ap)
    args = ap.parse_args(argv)
    with recorded(args.out):
        run(args)


def run(args):
    """The benchmark itself; what it prints is kept with --out."""
    lengths = list(args.lengths)
    model, tok = load_model_and_tokenizer(args.model)
    model.to(args.device)
    prompts = PasskeyPrompts(tok)
    ids = text_ids(tok, args.text, max(lengths))
    print(f"# {args.model} on {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print("| prompt tokens | passkey cell (prefill + 10 tokens) | PPL window (256 scored) | peak RSS GiB |")
    print("|---|---|---|---|")
    for n in lengths:
        case = passkey_cases([n], [0.5], 1)[0]
        built = prompts.build(case)
        with torch.no_grad():
            _sync(args.device)
            t0 = time.perf_counter()
            retrieve(model, tok, built)
            _sync(args.device)
            t_cell = time.perf_counter() - t0
            t0 = time.perf_counter()
            scored_nll(model, ids[:n], torch.arange(n - 256, n))
            _sync(args.device)
            t_ppl = time.perf_counter() - t0
        rss = peak_rss_mib() / 1024  # GiB
        print(f"| {n} | {t_cell:.1f} s | {t_ppl:.1f} s | {rss:.1f} |", flush=True)


if __name__ == "__main__":
    main()
