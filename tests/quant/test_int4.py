"""The int4 scheme (attnlab/quant/schemes/int4.py): one file, found by the scheme registry, so --quant, --method,
validation and the sweeps take it; its product is the dequantized weight's, its gathers are its product's
pieces, and it composes with the sparse MLP and an evicting cache on the four tiny architectures."""
import pytest
import torch

from attnlab.core import weights
from attnlab.quant.schemes import SCHEMES
from attnlab.quant.transform import QuantizedWeights, projections
from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.rules import CATS, TEAL, Oracle
from tiny_models import ARCHS, random_ids, tiny

quantize = SCHEMES.get("int4").quantize


@pytest.mark.parametrize("shape", [(48, 40), (300, 64), (64, 96)])  # out and in not multiples of 16 / 32 too
def test_each_group_of_32_is_rounded_to_its_own_16_levels(shape):
    torch.manual_seed(0)
    w = torch.randn(*shape)
    w4 = quantize(w)
    d = w4.dequantize()
    assert d.shape == w.shape
    groups = torch.nn.functional.pad(w, (0, -shape[1] % 32)).view(shape[0], -1, 32)
    step = (groups.amax(-1) - groups.amin(-1)) / 15  # (out, in'/32): one level
    err = torch.nn.functional.pad(d - w, (0, -shape[1] % 32)).view(shape[0], -1, 32).abs().amax(-1)
    # half a level, plus bf16's rounding (scale, zero and the kernel's output: 8 significant bits)
    assert (err <= step / 2 + groups.abs().amax(-1) * 2 ** -7).all()
    out, k = shape[0] + -shape[0] % 16, shape[1] + -shape[1] % 32  # padded as the kernel needs
    assert w4.nbytes == out * k // 2 + (k // 32) * out * 2 * 2  # 4 bits a weight, a bf16 scale and zero per 32


def test_the_product_the_rows_and_the_columns_are_the_dequantized_weights():
    torch.manual_seed(1)
    w, x, bias = torch.randn(80, 72), torch.randn(5, 72), torch.randn(80)
    w4 = quantize(w)
    d = w4.dequantize()
    ref = torch.nn.functional.linear(x.bfloat16().float(), d, bias)  # the kernel reads bf16 activations
    torch.testing.assert_close(w4.linear(x, bias), ref, atol=0.05, rtol=0.02)
    rows = torch.tensor([0, 9, 33, 79])
    torch.testing.assert_close(w4.rows(rows).linear(x), w4.linear(x)[:, rows], atol=1e-2, rtol=1e-2)
    v, cols = torch.randn(5, 72), torch.tensor([2, 31, 32, 70])
    torch.testing.assert_close(w4.columns().rows_product(v[:, cols], cols), v[:, cols] @ d[:, cols].T,
                               atol=0.05, rtol=0.02)  # bf16 in and out, as the kernel


@pytest.mark.parametrize("name", ARCHS)
def test_int4_inside_and_the_model_restored_bit_for_bit(name):
    model, ids = tiny(name), random_ids(12)[None]
    with torch.no_grad():
        before = model(ids).logits
        with QuantizedWeights(model, "int4"):
            assert all(type(weights.of(p)).__name__ == "Int4Weight" for p in projections(model))
            inside = model(ids).logits
    assert not torch.equal(inside, before)  # int4 really computed
    assert (inside.argmax(-1) == before.argmax(-1)).float().mean() > 0.5
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)


RULES = {"oracle": lambda: Oracle(0.5), "cats": lambda: CATS({0: 0.1, 1: 0.1}),
         "teal": lambda: TEAL({0: 0.3, 1: 0.3}, {0: 0.1, 1: 0.1})}


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rows", [1, 2])
def test_the_sparse_mlp_gathers_int4_as_its_mask_computes_it(name, rule, rows):
    """Gather mode reads only the kept units' rows and columns through the layout protocol: it equals mask mode,
    which multiplies the whole int4 weight and zeroes the dropped units (one row: the per-token path)."""
    model, x = tiny(name), random_ids(8, seed=5).view(2, 4)[:rows]
    with QuantizedWeights(model, "int4"), torch.no_grad():
        with SparseMLP(model, RULES[rule](), mode="mask"):
            masked = model(x).logits
        with SparseMLP(model, RULES[rule](), mode="gather"):
            gathered = model(x).logits
    torch.testing.assert_close(gathered, masked, atol=2e-2, rtol=2e-2)
