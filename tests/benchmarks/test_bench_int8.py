"""benchmarks/bench_int8.py and bench_decode.py compare equal work: every kernel computes the same product, and
the decode benchmark's GEMV chain reads every projection the model reads per token."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.core import int8
from attnlab.quant.transform import projections
from tiny_models import tiny


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_int8")


def test_every_kernel_computes_the_fp32_product_to_its_rounding(bench):
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(o, i, generator=g) / i ** 0.5 for o, i in [(48, 32), (16, 32), (32, 48)]]
    xs = [torch.randn(2, w.shape[1], generator=g) for w in weights]
    kernels = bench.kernels(weights, 2, with_torchao=False, compile_too=False)
    assert {"fp32", "bf16", "int8pack bf16", "int8pack fp32", "dequantize", "w8a8", "w8a8x2"} <= set(kernels)
    threads = torch.get_num_threads()
    # the integer kernels alone, on integer inputs of their own: the batch's rows, twice them, on one thread;
    # and oneDNN's prepacked linear (uint8 inputs)
    for name, n in (("int_mm, 2 rows", 2), ("int_mm, 4 rows", 4), ("int_mm, 2 rows, 1 thread", 2),
                    ("oneDNN qlinear, 2 rows", 2)):
        step, nbytes = kernels.pop(name)
        assert [o.shape for o in step(xs)] == [(n, w.shape[0]) for w in weights] and nbytes == kernels["w8a8"][1]
        assert torch.get_num_threads() == threads, name  # one thread for the call only
    assert "fbgemm dynamic" in kernels  # torch.ao's dynamic linear: on xs, so checked with the rest below
    ref = [F.linear(x, w) for x, w in zip(xs, weights)]
    for name, (step, nbytes) in kernels.items():
        for got, want in zip(step(xs), ref):
            assert got.shape == want.shape
            # int8 steps are a 254th of each row's range; bf16 keeps 8 significant bits
            torch.testing.assert_close(got.float(), want, atol=0.06, rtol=0.02, msg=name)
    assert kernels["int8pack bf16"][1] < kernels["bf16"][1] < kernels["fp32"][1]


def test_the_decode_chain_reads_every_projection_once(load_benchmark, monkeypatch):
    bench_decode = load_benchmark("bench_decode")
    model = tiny("llama")
    calls = []
    monkeypatch.setattr(int8, "linear", lambda x, w, bias=None: calls.append(w.q.shape) or x)
    bench_decode.chain(model, "int8", 1)()
    assert sorted(calls) == sorted((p.weight.shape[0], p.weight.shape[1]) for p in projections(model))


def test_the_decode_chain_reports_the_bytes_of_the_weights_it_reads(load_benchmark):
    bench_decode = load_benchmark("bench_decode")
    model = tiny("llama")
    fp32 = sum(p.weight.nbytes for p in projections(model))
    assert bench_decode.chain(model, None, 1).nbytes == fp32
    assert bench_decode.chain(model, None, 1, torch.bfloat16).nbytes == fp32 // 2
    # int8: a byte a weight, plus one bf16 scale per output row
    rows = sum(p.weight.shape[0] for p in projections(model))
    assert bench_decode.chain(model, "int8", 1).nbytes == fp32 // 4 + 2 * rows


def test_the_ledger_cells_are_bytes_roofline_and_yield(load_benchmark):
    bench_decode = load_benchmark("bench_decode")
    mib = 2**20
    # 4 MiB a step at 40 MiB/s: 10 steps a second, 2 tokens each -> roofline 20 tokens/s; 10 measured: 50%
    cells = bench_decode._ledger_cells(10.0, (2 * mib, mib, mib), 2, 40.0 * mib)
    assert cells == "4.0 | 1.0 | 1.0 | 20.0 | 50%"
    assert bench_decode._ledger_cells(10.0, (4 * mib, 0, 0), 1, 40.0 * mib) == "4.0 | 0.0 | 0.0 | 10.0 | 100%"


def test_the_decode_chain_reads_the_weights_a_scheme_entered_on_the_model(load_benchmark):
    # a calibrated scheme (smoothquant) can only be made with its calibration: the chain takes the model's own
    from attnlab.core import weights
    from attnlab.quant.transform import QuantizedWeights
    from tiny_models import random_ids

    bench_decode = load_benchmark("bench_decode")
    model = tiny("llama")
    with QuantizedWeights(model, "smoothquant", calibration=random_ids(16)):
        got = bench_decode.chain(model, "smoothquant", 1)
        assert all(w is weights.of(p) for w, p in zip(got.ws, projections(model)))
        got()

