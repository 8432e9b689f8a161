"""The bf16 scheme (attnlab/quant/schemes/bf16.py): each weight rounded to nearest bf16, each product a bf16
product (bf16 inputs, float32 sums, rounded to bf16; a bias added after, in the model's dtype), everything between
the products left in the model's dtype; entered and left like any method, restoring the float model bit for
bit."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.core import weights
from attnlab.models import arch
from attnlab.quant.schemes import SCHEMES
from attnlab.quant.transform import QuantizedWeights, projections
from tiny_models import ARCHS, random_ids, tiny

quantize = SCHEMES.get("bf16").quantize


def test_each_weight_is_rounded_to_its_nearest_bf16_at_half_the_bytes():
    torch.manual_seed(0)
    w = torch.randn(48, 40)
    wb = quantize(w)
    d = wb.dequantize()
    assert d.dtype == torch.float32 and torch.equal(d, w.bfloat16().float())
    # nearest: within half a unit in the last of bf16's 8 significant bits, relative to each weight
    assert ((d - w).abs() <= w.abs() * 2 ** -8).all()
    assert wb.nbytes * 2 == w.numel() * w.element_size()


def test_the_product_is_the_bf16_product_and_its_pieces_are_its_pieces():
    torch.manual_seed(1)
    w, x, bias = torch.randn(80, 72), torch.randn(2, 5, 72), torch.randn(80)
    wb = quantize(w)
    whole = wb.linear(x, bias)  # (2, 5, 80)
    assert whole.dtype == torch.float32 and whole.shape == (2, 5, 80)
    assert torch.equal(whole, F.linear(x.bfloat16(), w.bfloat16()).float() + bias)
    rows = torch.tensor([0, 9, 33, 79])
    assert torch.equal(wb.rows(rows).linear(x), wb.linear(x)[..., rows])
    v, cols = torch.randn(5, 72), torch.tensor([2, 31, 32, 70])
    kept = torch.zeros_like(v)
    kept[:, cols] = v[:, cols]
    # the kept columns' product and the masked whole product sum the same nonzero terms: equal to bf16 rounding
    torch.testing.assert_close(wb.columns().rows_product(v[:, cols], cols), wb.linear(kept), atol=0, rtol=2 ** -7)


def test_a_lent_scratch_buffer_gives_the_same_rows():
    from attnlab.sparsity.gather import Scratch

    wb, rows = quantize(torch.randn(32, 16)), torch.tensor([3, 1, 30])
    got = wb.rows(rows, Scratch()).w
    assert got.dtype == torch.bfloat16 and torch.equal(got, wb.w[rows])


@pytest.mark.parametrize("name", ARCHS)
def test_bf16_inside_computes_each_projection_in_bf16_and_the_model_is_restored_bit_for_bit(name):
    model, ids = tiny(name), random_ids(12)[None]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(ids).logits
        with QuantizedWeights(model, "bf16"):
            for p in projections(model):
                x = torch.randn(3, arch.weight(p).shape[1])
                want = F.linear(x.bfloat16(), arch.weight(p).bfloat16()).float()
                assert torch.equal(p(x), want if p.bias is None else want + p.bias)
            assert all(type(weights.of(p)).__name__ == "BF16Weight" for p in projections(model))
            inside = model(ids).logits
        assert not torch.equal(inside, before)  # bf16 really computed
        torch.testing.assert_close(inside, before, atol=0.05, rtol=0.05)
        assert torch.equal(model(ids).logits, before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
