"""W8A8: per-token int8 activations into the exact integer product, against the same rounding in float64."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.core import int8, w8a8
from attnlab.quant.schemes import SCHEMES


def _w(out=40, inp=48, seed=0, rows=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out, inp, generator=g), torch.randn(rows, inp, generator=g) * 3


def _reference(x, w8, bias=None):
    """What W8A8 stands for, in float64: each row of x rounded to int8 at its own scale, times the int8 weight."""
    x64 = x.double()  # x / s already, for a smoothed weight
    a = x64.abs().amax(-1, keepdim=True) / 127
    xq = torch.round(x64 / a)
    y = (xq @ w8.q[:, :w8.n_in].double().T) * a * w8.scale.double()
    return y if bias is None else y + bias.double()


def test_each_row_rounds_to_half_a_step_of_its_own_scale():
    _, x = _w()
    x[2] = 0  # an all-zero row quantizes to zeros
    xq, a = w8a8.quantize_rows(x)
    assert xq.dtype == torch.int8 and xq.abs().max() <= 127 and a.shape == (5, 1)
    assert ((xq.float() * a - x).abs() <= a / 2 + 1e-6).all()
    assert (xq[[0, 1, 3, 4]].abs().amax(-1) == 127).all()  # each row's largest takes the full range
    assert (xq[2] == 0).all()


@pytest.mark.parametrize("inp", [48, 24, 7])  # 24 and 7: the int8 weight is padded to a block of 16
def test_w8a8_linear_is_the_integer_product_of_the_rounded_rows(inp):
    w, x = _w(inp=inp)
    w8, bias = w8a8.quantize(w), torch.randn(w.shape[0])
    got = w8.linear(x, bias)
    assert got.dtype == x.dtype and got.shape == (5, w.shape[0])
    # the sums are exact integers: what is left is float32's rounding of two products and the bias
    torch.testing.assert_close(got.double(), _reference(x, w8, bias), rtol=1e-6, atol=1e-5)


def test_the_weight_is_int8s_and_only_the_activations_differ():
    w, x = _w()
    w8, w8a = int8.quantize(w), w8a8.quantize(w)
    assert torch.equal(w8.q, w8a.q) and torch.equal(w8.scale, w8a.scale) and w8.nbytes == w8a.nbytes
    assert not torch.equal(w8a.linear(x), w8.linear(x))  # bf16 activations there, int8 here


@pytest.mark.parametrize("quantize", [w8a8.quantize, w8a8.quantize_x2])
def test_gathered_rows_and_kept_columns_go_through_the_same_rounding(quantize):
    w, x = _w()
    w8, rows = quantize(w), torch.tensor([0, 5, 6, 31])
    assert torch.equal(w8.rows(rows).linear(x), w8.linear(x)[:, rows])  # the rows' own integer sums
    keep = torch.tensor([1, 4, 9, 40])
    zeroed = torch.zeros_like(x)
    zeroed[:, keep] = x[:, keep]  # the other input units zero: they change no row's scale
    torch.testing.assert_close(w8.columns().rows_product(x[:, keep], keep), w8.linear(zeroed))


def test_leading_dimensions_are_kept():
    w, x = _w()
    w8 = w8a8.quantize(w)
    torch.testing.assert_close(w8.linear(x[None].expand(3, -1, -1)), w8.linear(x)[None].expand(3, -1, -1))


def test_off_the_cpu_the_same_rounding_is_taken_in_float(monkeypatch):
    # the integer kernel is the CPU's: another device takes the fallback, which must stand for the same numbers
    w, x = _w()
    w8 = w8a8.quantize(w)

    class Elsewhere(torch.Tensor):  # a CPU tensor that says it is not on the CPU
        @property
        def device(self):
            return torch.device("meta")

    xq, a = w8a8.quantize_rows(x)
    monkeypatch.setattr(torch, "_int_mm", lambda *args: pytest.fail("the CPU kernel ran off the CPU"))
    fallback = F.linear((xq * a), w8.dequantize())
    got = w8a8.matmul(x.as_subclass(Elsewhere), w8.q[:, :w8.n_in], w8.scale).as_subclass(torch.Tensor)
    torch.testing.assert_close(got, fallback)
    torch.testing.assert_close(got.double(), _reference(x, w8), rtol=1e-5, atol=1e-4)


def test_the_scheme_is_registered_under_its_name():
    assert SCHEMES.get("w8a8").quantize is w8a8.quantize


# SmoothQuant: the same rounding of x / s against the int8 weight of W diag(s)

def _outlier(rows=6, inp=48, seed=1, unit=3, size=60.0):
    """A weight and inputs whose unit ``unit`` is ``size`` times the rest, in every row (an outlier channel)."""
    w, x = _w(inp=inp, seed=seed, rows=rows)
    x[:, unit] *= size
    return w, x


def test_smoothing_is_the_papers_formula_and_finite():
    w, x = _outlier()
    x_max = x.abs().amax(0)
    s = w8a8.smoothing(x_max, w)
    torch.testing.assert_close(s, (x_max / w.abs().amax(0)).sqrt())  # alpha 0.5: the geometric mean
    torch.testing.assert_close(w8a8.smoothing(x_max, w, alpha=1.0), x_max)  # all of it into the weight
    x_max[5], w[:, 7] = 0, 0  # a unit never seen, a zero column: clamped, not 0 or inf
    s = w8a8.smoothing(x_max, w)
    assert torch.isfinite(s).all() and (s > 0).all()


@pytest.mark.parametrize("inp", [48, 7])
def test_the_smoothed_product_rounds_x_over_s_against_the_smoothed_weight(inp):
    w, x = _w(inp=inp)
    s = torch.rand(inp) + 0.5
    w8, bias = w8a8.quantize(w, s), torch.randn(w.shape[0])
    assert torch.equal(w8.q, w8a8.quantize(w * s).q) and torch.equal(w8.smooth, s)  # the weight is W diag(s)
    assert w8.nbytes == w8a8.quantize(w).nbytes + 4 * inp  # and s is kept: one float32 an input unit
    torch.testing.assert_close(w8.linear(x, bias).double(), _reference(x / s, w8, bias), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(w8.dequantize() * s, w8a8.quantize(w * s).dequantize())  # it stands for W


def test_smoothing_moves_an_outlier_channel_into_the_weight():
    w, x = _outlier()
    exact = x @ w.T
    plain = (w8a8.quantize(w).linear(x) - exact).norm()
    smooth = (w8a8.smoothquant(w, x.abs().amax(0)).linear(x) - exact).norm()
    assert smooth < plain / 2  # the other units no longer round to a few levels of the outlier's scale


def test_smoothed_rows_and_kept_columns_round_as_the_whole_product():
    w, x = _outlier()
    w8, rows = w8a8.smoothquant(w, x.abs().amax(0)), torch.tensor([0, 5, 6, 31])
    assert torch.equal(w8.rows(rows).linear(x), w8.linear(x)[:, rows]) and torch.equal(w8.rows(rows).smooth, w8.smooth)
    keep = torch.tensor([1, 3, 9, 40])  # the outlier unit among them: its own s divides it
    zeroed = torch.zeros_like(x)
    zeroed[:, keep] = x[:, keep]
    torch.testing.assert_close(w8.columns().rows_product(x[:, keep], keep), w8.linear(zeroed))


def test_smoothquant_is_registered_as_a_calibrated_scheme():
    assert SCHEMES.get("smoothquant").calibrated and not SCHEMES.get("w8a8").calibrated
    w, x = _outlier()
    x_max = x.abs().amax(0)
    assert torch.equal(SCHEMES.get("smoothquant").quantize(w, x_max).linear(x), w8a8.smoothquant(w, x_max).linear(x))


# Two slices: the high rounding's residue rounded again, SLICE times finer, both through the integer product

def test_the_two_slices_stand_for_each_row_to_half_a_low_step():
    _, x = _w()
    x[2] = 0
    slices, a = w8a8.split_rows(x)
    hi, lo = slices[:5].float(), slices[5:].float()
    assert slices.dtype == torch.int8 and slices.shape == (10, 48) and slices.abs().max() <= 127
    assert torch.equal(slices[:5], w8a8.quantize_rows(x)[0])  # the high slice is W8A8's own rounding
    assert ((a * (hi + lo / w8a8.SLICE) - x).abs() <= a / w8a8.SLICE / 2 + 1e-6).all()
    assert lo.abs().amax() > 100  # the residue takes the low slice's range (it spans half a high step)
    assert (slices[[2, 7]] == 0).all()


@pytest.mark.parametrize("inp", [48, 24, 7])
def test_the_two_slice_product_is_the_integer_product_of_each_slice(inp):
    w, x = _w(inp=inp)
    w8, bias = w8a8.quantize_x2(w), torch.randn(w.shape[0])
    got = w8.linear(x, bias)
    slices, a = w8a8.split_rows(x)
    q = w8.q[:, :inp].double().T
    want = (slices[:5].double() @ q + slices[5:].double() @ q / w8a8.SLICE) * a * w8.scale.double() + bias.double()
    assert got.dtype == x.dtype and got.shape == (5, w.shape[0])
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-5)


def test_two_slices_keep_the_product_within_half_a_low_step_of_the_int8_weights():
    """The error left is the activations' half low step against each weight row's size: far below one slice's,
    and below the weight-only kernel's bf16 activations' (the weight's own rounding is the same in all three)."""
    w, x = _outlier()  # an outlier unit sets each row's scale, as in a real model's hidden states
    w8 = w8a8.quantize_x2(w)
    exact = x.double() @ w8.dequantize().double().T  # the int8 weight against x as it is
    err = (w8.linear(x).double() - exact).abs()
    a = x.abs().amax(-1, keepdim=True).double() / 127
    bound = a / w8a8.SLICE / 2 * w8.dequantize().double().abs().sum(-1)  # (rows, out)
    assert (err <= bound + 1e-4).all()
    one_slice = (w8a8.quantize(w).linear(x).double() - exact).abs().max()
    weight_only = (int8.quantize(w).linear(x).double() - exact).abs().max()
    assert err.max() < one_slice / 50 and err.max() < weight_only


def test_off_the_cpu_the_two_slices_are_summed_in_float(monkeypatch):
    w, x = _w()
    w8 = w8a8.quantize_x2(w)

    class Elsewhere(torch.Tensor):
        @property
        def device(self):
            return torch.device("meta")

    on_cpu = w8.linear(x)
    monkeypatch.setattr(torch, "_int_mm", lambda *args: pytest.fail("the CPU kernel ran off the CPU"))
    got = w8a8.matmul_x2(x.as_subclass(Elsewhere), w8.q[:, :w8.n_in], w8.scale).as_subclass(torch.Tensor)
    torch.testing.assert_close(got, on_cpu, rtol=1e-5, atol=1e-4)


def test_w8a8x2_is_registered_under_its_name():
    assert SCHEMES.get("w8a8x2").quantize is w8a8.quantize_x2 and not SCHEMES.get("w8a8x2").calibrated
