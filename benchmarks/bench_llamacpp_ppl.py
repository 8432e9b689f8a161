"""The accuracy beside bench_llamacpp.py's speed: SmolLM2's perplexity and top-1 agreement with its float model,
through llama.cpp's GGUFs and through attnlab's weight schemes, on the same token ids in the same windows.

The protocol is quant-agreement's (attnlab.quant.experiments): the text's first --tokens ids in windows of
--window, each window its own forward from position 0, every position but each window's first scored.
attnlab's float model is the reference for agreement. llama.cpp F32 holds the same weights, so its row is the
check that the two sides read the same ids the same way (its perplexity should be the float model's to
float rounding). Each row's change of perplexity carries quant-agreement's interval: the 95% paired bootstrap over
the windows. SmoothQuant calibrates on --calibration (never the scored text).

    L/bin/python benchmarks/bench_llamacpp_ppl.py --dir ggufs --out benchmarks/results/llamacpp-ppl

Run it in bench_llamacpp.py's venv (llama-cpp-python built there), after that file's gguf step.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from attnlab.methods.base import CALIBRATION_TEXT, CALIBRATION_TOKENS

from host import add_out, corpus, machine, number, parser, positive_int, recorded  # benchmarks/host.py

GGUFS = ("F32", "BF16", "Q8_0", "Q4_1")
SCHEMES_RUN = (None, "int8", "w8a8", "smoothquant", "w8a8x2", "int4")  # attnlab's float model, then its weight schemes


def llamacpp_predictions(path: Path, ids: torch.Tensor, window: int, bar) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's (argmax, NLL) over quant-agreement's windows: each window evaluated afresh, every position's
    logits kept, scored by the loop that scores attnlab's side."""
    import llama_cpp
    import numpy as np

    from attnlab.quant.experiments import windowed

    llm = llama_cpp.Llama(str(path), n_ctx=window, n_batch=window, n_threads=2, n_threads_batch=2,
                          logits_all=True, verbose=False)

    def logits_of(win: torch.Tensor) -> torch.Tensor:  # (w,) -> (w, V)
        llm.reset()
        llm.eval(win.tolist())
        return torch.from_numpy(np.array(llm.scores[:win.numel()]))

    return windowed(logits_of, ids, window, bar)


def row(name: str, top: torch.Tensor, nll: torch.Tensor, ref: tuple[torch.Tensor, torch.Tensor], ids_len: int,
        window: int) -> dict:
    """One configuration's perplexity, its change from the reference's (with its interval over the windows) and
    its top-1 agreement with the reference."""
    from attnlab.quant.experiments import window_intervals

    ref_top, ref_nll = ref
    ppl, ref_ppl = math.exp(float(nll.mean())), math.exp(float(ref_nll.mean()))
    share, ratio, n = window_intervals(ids_len, window, top == ref_top, nll, ref_nll)
    return {"config": name, "ppl": ppl, "ppl_vs_float": ppl / ref_ppl - 1, "ppl_vs_float_interval": ratio,
            "top1_agreement": float((top == ref_top).double().mean()), "top1_agreement_interval": share,
            "windows": n, "positions": int(top.numel())}


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--dir", type=Path, default=Path("ggufs"), help="the GGUFs' folder (default ggufs)")
    ap.add_argument("--text", type=corpus(), default="wikitext-2/test.txt",
                    help="the text (default wikitext-2/test.txt)")
    ap.add_argument("--tokens", type=positive_int, default=16384, help="ids scored (default 16384)")
    ap.add_argument("--window", type=number(int, ">= 2"), default=512, help="tokens a window (default 512)")
    ap.add_argument("--calibration", type=corpus(), default=CALIBRATION_TEXT,
                    help=f"SmoothQuant's calibration text, its first {CALIBRATION_TOKENS} ids "
                    f"(default {CALIBRATION_TEXT})")
    add_out(ap)
    args = ap.parse_args(argv)
    missing = [n for n in GGUFS if not (args.dir / f"{n}.gguf").exists()]
    if missing:
        ap.error(f"--dir {args.dir}: no {', '.join(m + '.gguf' for m in missing)}; make them first with "
                 "bench_llamacpp.py's gguf step")
    torch.set_num_threads(2)
    from tqdm import tqdm

    from attnlab.evals.inputs import text_ids
    from attnlab.models.pretrained import load_model_and_tokenizer
    from attnlab.quant.experiments import predictions
    from attnlab.quant.transform import quantized

    model, tok = load_model_and_tokenizer("smollm2")
    ids = text_ids(tok, args.text, args.tokens, "--text")
    calib = text_ids(tok, args.calibration, CALIBRATION_TOKENS, "--calibration")
    figures = {"text": args.text, "tokens": int(ids.numel()), "window": args.window,
               "calibration": {"text": args.calibration, "tokens": int(calib.numel())}}
    with recorded(args.out, figures):
        runs = {}
        for scheme in SCHEMES_RUN:
            name = f"attnlab {scheme or 'fp32'}"
            with quantized(model, scheme, calib), tqdm(total=ids.numel(), desc=name, file=sys.stderr) as bar:
                runs[name] = predictions(model, ids, args.window, bar)  # quant-agreement's own
        for g in GGUFS:
            with tqdm(total=ids.numel(), desc=f"llama.cpp {g}", file=sys.stderr) as bar:
                runs[f"llama.cpp {g}"] = llamacpp_predictions(args.dir / f"{g}.gguf", ids, args.window, bar)
        figures["rows"] = [row(n, top, nll, runs["attnlab fp32"], ids.numel(), args.window)
                           for n, (top, nll) in runs.items()]
        print(f"# {machine()}; SmolLM2-135M, {args.text}, {ids.numel()} ids in windows of {args.window}\n")
        print("| configuration | perplexity | vs attnlab fp32 (95% interval) | top-1 agreement with attnlab fp32 |\n"
              "|---|---|---|---|")
        for r in figures["rows"]:
            lo, hi = r["ppl_vs_float_interval"]
            print(f"| {r['config']} | {r['ppl']:.3f} | {r['ppl_vs_float']:+.2%} ({lo:+.2%} to {hi:+.2%}) | "
                  f"{r['top1_agreement']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
