"""The active-set cache: after any sequence of sets (growing, shrinking, disjoint, repeated) its first m
slots hold exactly the set's rows, and it copies only the neurons that enter."""
import pytest
import torch
import torch.nn.functional as F

from attnlab.quant.schemes import SCHEMES
from attnlab.sparsity.gather import ActiveSet


def _cache(n=40, d=6, o=5, bias=True, seed=0) -> ActiveSet:
    g = torch.Generator().manual_seed(seed)
    w = tuple(torch.randn(n, d, generator=g) for _ in range(2))
    b = tuple(torch.randn(n, generator=g) for _ in range(2)) if bias else None
    return ActiveSet(w, torch.randn(n, o, generator=g), b)


def _check(c: ActiveSet, keep: torch.Tensor) -> None:
    held = c.neurons
    assert sorted(held.tolist()) == keep.nonzero().squeeze(1).tolist()
    for j, w in enumerate(c.w_in):
        assert torch.equal(c.buf_in[:c.m, j], w[held])
        if c.b_in is not None:
            assert torch.equal(c.buf_b[:c.m, j], c.b_in[j][held])
    assert torch.equal(c.buf_out[:c.m], c.w_out_t[held])
    assert torch.equal(c.slot_of[held], torch.arange(c.m)) and int((c.slot_of >= 0).sum()) == c.m


@pytest.mark.parametrize("bias", [True, False])
def test_the_active_slots_hold_exactly_the_set_after_any_sequence_of_sets(bias):
    c, g = _cache(bias=bias), torch.Generator().manual_seed(1)
    sets = []
    for k in [10, 10, 25, 3, 40, 1, 17, 17, 0, 8]:
        keep = torch.zeros(40, dtype=torch.bool)
        keep[torch.randperm(40, generator=g)[:k]] = True
        sets.append(keep)
    sets.insert(4, sets[3])  # a repeated set: nothing copied
    for keep in sets:
        c.update(keep)
        _check(c, keep)


def test_forward_equals_the_dense_computation_on_the_set():
    c = _cache()
    keep = torch.zeros(40, dtype=torch.bool)
    keep[::3] = True
    c.update(keep)
    x = torch.randn(4, 6)  # (N, d)
    y = c.forward_in(x)  # (N, m, 2)
    for j in range(2):
        torch.testing.assert_close(y[..., j], F.linear(x, c.w_in[j], c.b_in[j])[:, c.neurons])
    h = torch.randn(4, 40) * keep  # (N, n) zero outside the set
    torch.testing.assert_close(c.forward_out(h[:, c.neurons], None), h @ c.w_out_t)


def test_only_entering_neurons_are_counted_as_copied():
    c = _cache()
    first = torch.zeros(40, dtype=torch.bool)
    first[:20] = True
    second = first.clone()
    second[:5] = False
    second[20:25] = True  # 5 leave, 5 enter
    c.update(first)
    c.update(second)
    assert (c.entered, c.kept, c.steps) == (25, 15, 2)
    assert c.reuse() == 15 / 40


def test_scratch_copies_the_rows_into_one_reused_buffer():
    from attnlab.sparsity.gather import Scratch

    g = torch.Generator().manual_seed(0)
    w, big = torch.randn(10, 4, generator=g, requires_grad=True), torch.randn(20, 6, generator=g)
    scratch = Scratch()
    a = scratch.rows(w, torch.tensor([7, 2, 5]))
    assert torch.equal(a, w.detach()[[7, 2, 5]])  # also under grad mode: the copy reads detached weights
    ptr = scratch.buf.data_ptr()
    b = scratch.rows(w, torch.tensor([0, 9]))
    assert torch.equal(b, w.detach()[[0, 9]]) and scratch.buf.data_ptr() == ptr  # no new allocation
    c = scratch.rows(big, torch.arange(15))
    assert torch.equal(c, big[:15]) and scratch.buf.numel() >= big.numel()  # grown once for the larger weight


def test_an_empty_row_set_gives_zeros_plus_the_bias_at_batch_1_and_more():
    # TEAL keeps no channel of h when every entry is below its threshold: embedding_bag refused the empty bag
    from attnlab.sparsity.gather import rows_matmul

    w_t, bias, rows = torch.randn(5, 3), torch.randn(3), torch.zeros(0, dtype=torch.long)
    for n in (1, 4):
        torch.testing.assert_close(rows_matmul(torch.zeros(n, 0), w_t, rows, bias), bias.expand(n, 3))


@pytest.mark.parametrize("scheme", SCHEMES.names())
def test_a_quantized_weight_read_by_no_input_unit_gives_zeros_plus_the_bias(scheme):
    # the same empty set through a weight scheme's Columns (its own product, not embedding_bag)
    from attnlab.sparsity.gather import rows_matmul

    x_max = (torch.rand(64) + 0.5,) if SCHEMES.get(scheme).calibrated else ()  # SmoothQuant's maxima, made up
    w = SCHEMES.get(scheme).quantize(torch.randn(8, 64), *x_max)
    bias, rows = torch.randn(8), torch.zeros(0, dtype=torch.long)
    for n in (1, 4):
        torch.testing.assert_close(rows_matmul(torch.zeros(n, 0), w.columns(), rows, bias), bias.expand(n, 8))
