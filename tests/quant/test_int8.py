"""The int8 mechanism: per-channel quantization and the kernel, against the dequantized weight."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.core import int8


def _w(out=40, inp=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out, inp, generator=g), torch.randn(5, inp, generator=g)


def test_quantization_error_is_at_most_half_a_step_per_channel():
    w, _ = _w()
    w8 = int8.quantize(w)
    assert w8.q.dtype == torch.int8 and w8.q.abs().max() <= 127
    step = w8.scale.float()[:, None]  # (out, 1)
    assert ((w8.dequantize() - w).abs() <= step / 2 + 1e-7).all()
    assert (w8.scale.float() >= w.abs().amax(1) / 127).all()  # rounded up: no row clips


def test_an_all_zero_row_quantizes_to_zeros():
    w, _ = _w()
    w[3] = 0
    assert int8.quantize(w).dequantize()[3].abs().max() == 0


@pytest.mark.parametrize("inp", [48, 24, 7])  # 24 and 7 are not multiples of the kernel's block of 16
def test_int8_linear_equals_the_dequantized_matmul_to_bf16_rounding(inp):
    w, x = _w(inp=inp)
    w8 = int8.quantize(w)
    bias = torch.randn(w.shape[0])
    ref = F.linear(x.to(torch.bfloat16).float(), w8.dequantize(), bias)  # the kernel reads bf16 activations
    got = int8.linear(x, w8, bias)
    assert got.dtype == x.dtype and got.shape == ref.shape
    # the product is rounded to bf16 (8 significant bits) before the bias is added
    assert ((got - ref).abs() <= 2 ** -8 * (ref - bias).abs() + 1e-4).all()


def test_int8_linear_keeps_leading_dimensions():
    w, x = _w()
    w8 = int8.quantize(w)
    x3 = x[None].expand(3, -1, -1)  # (3, 5, in)
    torch.testing.assert_close(int8.linear(x3, w8), int8.linear(x, w8)[None].expand(3, -1, -1))


def test_gathered_rows_compute_the_rows_of_the_whole_product():
    w, x = _w()
    w8, rows = int8.quantize(w), torch.tensor([0, 5, 6, 31])
    torch.testing.assert_close(int8.linear(x, int8.gather_rows(w8, rows)), int8.linear(x, w8)[:, rows])


@pytest.mark.parametrize("inp", [48, 7])
def test_columns_read_by_input_units_equal_the_product_with_the_others_zero(inp):
    w, x = _w(inp=inp)
    cols = int8.Int8Columns.of(int8.quantize(w))
    rows = torch.tensor([1, 2, 4]) if inp == 7 else torch.arange(0, inp, 3)
    zeroed = torch.zeros_like(x)
    zeroed[:, rows] = x[:, rows]
    torch.testing.assert_close(cols.rows_product(x[:, rows], rows), cols.dense(zeroed, None), atol=1e-2, rtol=2 ** -7)
