"""Which int8 kernel to build on: one decode step's projections of SmolLM2-135M, read as decode reads them.

GEMVs (batch 1, or --batch rows) through every projection of SmolLM2's 30 layers (q, k, v, o,
gate, up, down: distinct weights, so each is read from memory, not from the CPU's cache) and, separately,
its 49152 x 576 LM head, under each kernel, side by side in one run (rounds interleaved; medians):

- fp32: ``F.linear`` on fp32 weights (what decode runs today)
- bf16: ``F.linear`` on bf16 weights and activations
- int8pack bf16: ``torch._weight_int8pack_mm`` with bf16 activations and scales (attnlab.core.int8)
- int8pack fp32: the same kernel fed fp32 activations
- torchao: torchao's ``Int8WeightOnlyConfig`` weight (``F.linear`` on its int8 tensor subclass), eager; with
  ``--compile`` also torch.compile'd (inductor fuses the dequantization into the product), and fp32 compiled
- torchao int4: torchao's CPU int4 tensor (``_weight_int4pack_mm_for_cpu``, group 32, bf16 activations): the
  issue's "int4 only if it is faster here"
- dequantize: the int8 weight converted to fp32 each call, then ``F.linear`` (the naive way)
- w8a8: the same int8 weights, each input row rounded to int8, ``torch._int_mm`` (attnlab.core.w8a8.matmul);
  w8a8x2: each row as two int8 slices, both through one ``_int_mm`` of twice the rows (``matmul_x2``)
- int_mm, B rows / 2B rows: ``torch._int_mm`` alone on inputs already int8, at the table's batch and at twice
  it -- what the second slice asks of the kernel, with no rounding around it; and at B rows on one thread
  (a kernel bound by memory reads hardly slows on one core of two; one bound by its own work halves)
- fbgemm dynamic: PyTorch's other int8 product, torch.ao's dynamic quantized linear
  (``quantized::linear_dynamic``: the weight prepacked for fbgemm, each input rounded to uint8 inside the call)
- oneDNN qlinear: oneDNN's int8 linear with the weight prepacked in its own layout (``onednn::qlinear_pointwise``,
  what inductor's x86 int8 path calls) on inputs already uint8

The ceiling: the time to read the chain's bytes at this machine's memory bandwidth, measured as a sum over
the same fp32 weights (``torch.sum``, one read of every byte); each kernel's bytes / that bandwidth is the
floor it could reach. Weights are random (the shapes decide the time).

    python benchmarks/bench_int8.py --out benchmarks/results/bench-int8
"""
from __future__ import annotations

import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from attnlab.core import int8, w8a8

from host import add_out, need_tool, parser, positive_int, recorded  # benchmarks/host.py

# SmolLM2-135M: d_model 576, d_ff 1536, 9 query heads and 3 KV heads of 64, 30 layers, vocabulary 49152
D, FF, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
LAYER_SHAPES = [(D, D), (KV, D), (KV, D), (D, D), (FF, D), (FF, D), (D, FF)]  # q k v o gate up down: (out, in)


class Chain(torch.nn.Module):
    """The projections as one module (what torch.compile and torchao's quantize_ take): xs -> their outputs."""

    def __init__(self, weights: list[torch.Tensor]):
        super().__init__()
        self.lins = torch.nn.ModuleList(torch.nn.Linear(w.shape[1], w.shape[0], bias=False) for w in weights)
        for lin, w in zip(self.lins, weights):
            lin.weight.data = w

    def forward(self, xs):
        return [lin(x) for lin, x in zip(self.lins, xs)]


def _torchao(weights: list[torch.Tensor]) -> Chain:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    chain = Chain([w.clone() for w in weights])
    quantize_(chain, Int8WeightOnlyConfig())
    return chain


def _int4(weights: list[torch.Tensor]) -> list:
    """torchao's CPU int4 weights (tinygemm layout, one scale and zero per 32 inputs), bf16 as it takes them."""
    from torchao.prototype.quantization.int4.int4_opaque_tensor import Int4OpaqueTensor

    return [Int4OpaqueTensor.from_hp(w.to(torch.bfloat16), block_size=[1, 32]) for w in weights]


def compiled(chain: Chain):
    """torch.compile'd chain (inductor; compiled at its first call, which ``timed``'s warm-up makes)."""
    fn = torch.compile(chain)
    return lambda xs: fn(xs)


def kernels(weights: list[torch.Tensor], batch: int, with_torchao: bool, compile_too: bool) -> dict:
    """name -> (step(x) running the chain, bytes read)."""
    q8 = [int8.quantize(w) for w in weights]
    # the same int8 weights, their products as W8A8's and as W8A8x2's (what w8a8.quantize / quantize_x2 make)
    qa, qx2 = [w8a8.W8A8Weight(*w) for w in q8], [w8a8.W8A8x2Weight(*w) for w in q8]
    ints = {n: [torch.randint(-127, 128, (n, w.q.shape[1]), dtype=torch.int8) for w in q8]  # (n, in) each
            for n in (batch, 2 * batch)}
    bf = [w.to(torch.bfloat16) for w in weights]
    b32 = sum(w.numel() * 4 for w in weights)
    b8 = sum(w.nbytes for w in q8)
    scale32 = [w.scale.float() for w in q8]
    out = {
        "fp32": (lambda xs: [F.linear(x, w) for x, w in zip(xs, weights)], b32),
        "bf16": (lambda xs: [F.linear(x.to(torch.bfloat16), w) for x, w in zip(xs, bf)], b32 // 2),
        "int8pack bf16": (lambda xs: [int8.linear(x, w) for x, w in zip(xs, q8)], b8),
        "int8pack fp32": (lambda xs: [torch._weight_int8pack_mm(x, w.q, s) for x, w, s in zip(xs, q8, scale32)], b8),
        "dequantize": (lambda xs: [F.linear(x, w.q.float() * w.scale.float()[:, None]) for x, w in zip(xs, q8)], b8),
        "w8a8": (lambda xs: [w.linear(x) for x, w in zip(xs, qa)], b8),
        "w8a8x2": (lambda xs: [w.linear(x) for x, w in zip(xs, qx2)], b8),
    }
    for n, xq in ints.items():  # bound now: each entry its own inputs
        out[f"int_mm, {n} rows"] = (lambda _, xq=xq: [torch._int_mm(x, w.q.t()) for x, w in zip(xq, q8)], b8)
    out[f"int_mm, {batch} rows, 1 thread"] = (lambda _: one_thread(ints[batch], q8), b8)
    out.update(torch_int8_linears(q8, batch, b8))
    if with_torchao:
        tao = _torchao(weights)
        out["torchao"] = (tao, b8)
        w4 = _int4(weights)
        b4 = sum(w.numel() // 2 + w.numel() // 32 * 4 for w in weights)  # 4 bits, a bf16 scale and zero per 32
        out["torchao int4 (group 32)"] = (lambda xs: [F.linear(x.to(torch.bfloat16), w) for x, w in zip(xs, w4)], b4)
        if compile_too:
            out["torchao + torch.compile"] = (compiled(tao), b8)
    if compile_too:
        out["fp32 + torch.compile"] = (compiled(Chain(weights)), b32)
    return out


def one_thread(xs: list[torch.Tensor], q8: list) -> list:
    """``torch._int_mm(x, w.q.t())`` over the chain on one torch thread (the threads as they were after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [torch._int_mm(x, w.q.t()) for x, w in zip(xs, q8)]
    finally:
        torch.set_num_threads(threads)


def torch_int8_linears(q8: list, batch: int, nbytes: int) -> dict:
    """The int8 linears PyTorch ships besides ``_int_mm``, on the same int8 weights and scales: name -> (step,
    bytes). Each is left out where this build lacks its engine."""
    out = {}
    zeros = [torch.zeros(w.q.shape[0], dtype=torch.long) for w in q8]
    scales = [w.scale.float() for w in q8]
    if "fbgemm" in torch.backends.quantized.supported_engines:
        with warnings.catch_warnings():  # quantized tensors are deprecated; this is the API their linear takes
            warnings.simplefilter("ignore")
            qws = [torch._make_per_channel_quantized_tensor(w.q, s.double(), z, 0)
                   for w, s, z in zip(q8, scales, zeros)]
        packed = [torch.ops.quantized.linear_prepack(qw, None) for qw in qws]
        out["fbgemm dynamic"] = (lambda xs: [torch.ops.quantized.linear_dynamic(x, p) for x, p in zip(xs, packed)],
                                 nbytes)
    if torch.backends.mkldnn.is_available():
        onednn = torch.ops.onednn
        packs = [onednn.qlinear_prepack(w.q, [batch, w.q.shape[1]]) for w in q8]
        xu = [torch.randint(0, 256, (batch, w.q.shape[1]), dtype=torch.uint8) for w in q8]  # zero point 128

        def qlinear(_):
            return [onednn.qlinear_pointwise(x, 0.01, 128, p, s, z, None, 1.0, 0, torch.float32, "none", [], "")
                    for x, p, s, z in zip(xu, packs, scales, zeros)]
        out[f"oneDNN qlinear, {batch} rows"] = (qlinear, nbytes)
    return out


def timed(step, x, repeats: int) -> float:
    """Median seconds of ``step(x)`` over ``repeats`` calls (one warm-up call first)."""
    step(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bandwidth(weights: list[torch.Tensor], repeats: int) -> float:
    """Bytes per second of one read of every weight (torch.sum over each)."""
    return sum(w.nbytes for w in weights) / timed(lambda _: [w.sum() for w in weights], None, repeats)


def table(name: str, weights: list[torch.Tensor], batch: int, rounds: int, with_torchao: bool,
          compile_too: bool) -> None:
    ks = kernels(weights, batch, with_torchao, compile_too)
    x = [torch.randn(batch, w.shape[1]) for w in weights]  # each projection's input (batch, in)
    per = {k: [] for k in ks}
    bw = []
    for _ in range(rounds):  # rounds interleave the kernels, so drift hits each alike
        bw.append(bandwidth(weights, 1))
        for k, (step, _) in ks.items():
            per[k].append(timed(step, x, 1))
    bw_med, base = statistics.median(bw), statistics.median(per["fp32"])
    print(f"\n### {name}, batch {batch} ({rounds} rounds, medians; memory read {bw_med / 1e9:.1f} GB/s)\n")
    print("| kernel | ms | vs fp32 | MB read | floor at that bandwidth, ms | share of the floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for k, (_, nbytes) in ks.items():
        t, floor = statistics.median(per[k]), nbytes / bw_med
        print(f"| {k} | {t * 1e3:.2f} | {base / t:.2f}x | {nbytes / 1e6:.1f} | {floor * 1e3:.2f} | {floor / t:.0%} |")


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=positive_int, default=15, help="interleaved rounds per table (medians)")
    ap.add_argument("--batch", type=positive_int, nargs="+", default=[1, 8], help="rows per GEMV")
    ap.add_argument("--no-torchao", action="store_true", help="leave torchao out (when it is not installed)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile torchao's and the fp32 chain "
                    "(inductor needs a C++ compiler; compiling takes minutes here)")
    add_out(ap)
    args = ap.parse_args(argv)
    if not args.no_torchao:
        need_tool(ap, "torchao", "pip install 'attnlab[bench]', or leave it out with --no-torchao", module=True)
    if args.compile:  # inductor compiles C++ with $CXX, else g++
        need_tool(ap, os.environ.get("CXX", "g++"), "--compile needs the C++ compiler torch.compile's inductor "
                  "calls; install it, or leave out --compile")
    torch.manual_seed(0)
    layers = [torch.randn(o, i) / i ** 0.5 for _ in range(LAYERS) for o, i in LAYER_SHAPES]
    head = [torch.randn(VOCAB, D) / D ** 0.5]
    with recorded(args.out):
        print(f"# int8 kernels on SmolLM2-135M's projections (torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads)")
        for b in args.batch:
            table(f"the 210 layer projections ({LAYERS} layers x 7)", layers, b, args.rounds, not args.no_torchao,
                  args.compile)
            table("the LM head (49152 x 576)", head, b, args.rounds, not args.no_torchao, args.compile)


if __name__ == "__main__":
    main()
