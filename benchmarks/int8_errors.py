"""Where int8's top-1 disagreements come from: the weights' rounding, or the kernel's bf16 activations?

Each source of error applied alone to SmolLM2's projections, then together, scored as ``quant-agreement``
scores int8 (argmax agreement with the float model and perplexity, windows of 512 tokens of WikiText-2
test): int8 weights with fp32 activations (the dequantized weight), fp32 weights with inputs rounded to
bf16, fp32 weights with outputs rounded to bf16, the shipped kernel (``QuantizedWeights``), and the shipped
kernel with the LM head left float. Not a timing: run it anywhere.

    python benchmarks/int8_errors.py --out benchmarks/results/int8-errors
"""
from __future__ import annotations

import math

import torch.nn.functional as F

from attnlab.core import int8
from attnlab.evals.inputs import load_model, text_ids
from attnlab.models import arch
from attnlab.quant.experiments import predictions
from attnlab.quant.transform import QuantizedWeights, projections

from host import add_out, number, parser, recorded  # benchmarks/host.py


def _forwards(model):
    """name -> (projection -> its forward) for each error source alone."""
    w8 = {p: int8.quantize(arch.weight(p)) for p in projections(model)}

    def bf16(t):
        return t.bfloat16().float()

    return {
        "int8 weights, fp32 activations (dequantized)": lambda p: lambda x: F.linear(x, w8[p].dequantize(), p.bias),
        "fp32 weights, inputs rounded to bf16": lambda p: lambda x: F.linear(bf16(x), arch.weight(p), p.bias),
        "fp32 weights, outputs rounded to bf16": lambda p: lambda x: bf16(F.linear(x, arch.weight(p), p.bias)),
    }


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--tokens", type=number(int, ">= 2"), default=4096, help="tokens of WikiText-2 test scored")
    add_out(ap)
    args = ap.parse_args(argv)
    model, tok = load_model("smollm2")
    ids = text_ids(tok, "wikitext-2/test.txt", args.tokens)
    top_f, nll_f = predictions(model, ids, 512)
    results = {}
    for name, forward_of in _forwards(model).items():
        projs = projections(model)
        for p in projs:
            p.forward = forward_of(p)
        try:
            results[name] = predictions(model, ids, 512)
        finally:
            for p in projs:
                del p.forward
    for name, head in (("the int8 kernel (QuantizedWeights)", True), ("the int8 kernel, LM head left float", False)):
        with QuantizedWeights(model, "int8", lm_head=head):
            results[name] = predictions(model, ids, 512)
    with recorded(args.out):
        print(f"# int8's errors by source, SmolLM2-135M, {top_f.numel()} positions of WikiText-2 test "
              f"(float PPL {math.exp(float(nll_f.mean())):.3f})\n")
        print("| applied | top-1 agreement with float | PPL | PPL / float |")
        print("|---|---:|---:|---:|")
        for name, (top, nll) in results.items():
            ppl = math.exp(float(nll.mean()))
            print(f"| {name} | {float((top == top_f).double().mean()):.4f} | {ppl:.3f} | "
                  f"{ppl / math.exp(float(nll_f.mean())):.4f} |")


if __name__ == "__main__":
    main()
