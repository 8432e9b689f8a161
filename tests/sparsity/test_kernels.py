"""The Triton kernels of SparseMLP's "kernel" mode, run by Triton's interpreter on the CPU: each equals the
masked dense computation on random shapes that are no multiple of the blocks, and a decode in kernel mode
equals mask mode for every rule (on a GPU the same checks run in benchmarks/gpu_sparse_kernel.py)."""
import os

import pytest
import torch
import torch.nn.functional as F

from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.registry import RULES
from sparsity.test_mlp import _decode, _ids, _rules
from tiny_models import ARCHS

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1"  # tests/conftest.py: the kernels run on CPU tensors
from attnlab.sparsity import kernels  # noqa: E402


def _keep(n: int, share: float, g) -> torch.Tensor:
    return torch.rand(n, generator=g) < share


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("act", ["silu", "relu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gate_up_equals_the_masked_dense_rows(gated, act, dtype):
    g = torch.Generator().manual_seed(3)
    n, d = 53, 600  # ragged edges: 53 rows in blocks of 16, 600 columns in blocks of 512
    x, w_g, w_u = (torch.randn(*s, generator=g).to(dtype) for s in [(d,), (n, d), (n, d)])
    keep = _keep(n, 0.4, g)
    h = kernels.gate_up(x, w_g if gated else None, w_u, keep, act)
    f = F.silu if act == "silu" else F.relu
    up = w_u.float() @ x.float()
    ref = (f(w_g.float() @ x.float()) * up if gated else f(up)) * keep
    assert h.dtype == dtype and h.shape == (n,)
    torch.testing.assert_close(h.float(), ref, rtol=2e-3 if dtype == torch.float16 else 1e-5, atol=2e-3)
    assert (h[~keep] == 0).all() and (h[keep] != 0).any()


def test_rows_axpy_reads_only_the_rows_whose_weight_is_not_zero_and_sums_them():
    g = torch.Generator().manual_seed(4)
    m, o = 150, 300  # ragged: 150 rows in blocks of 64, 300 outputs in blocks of 256
    keep = _keep(m, 0.5, g)
    v, w_t = torch.randn(m, generator=g) * keep, torch.randn(m, o, generator=g)
    y = kernels.rows_axpy(v, w_t)
    torch.testing.assert_close(y, v @ w_t, rtol=1e-5, atol=1e-5)
    w_t[~keep] = float("nan")  # a row whose v_i is 0 is never read: its NaNs cannot reach y
    assert torch.isfinite(kernels.rows_axpy(v, w_t)).all()


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("rule_name", RULES.names())
def test_a_decode_in_kernel_mode_equals_mask_mode_for_every_rule(tiny_models, name, rule_name, monkeypatch):
    model, ids = tiny_models[name], _ids(1, 6)
    rule = _rules(model, _ids(4, 16, seed=2), 0.5)[rule_name]
    calls = []
    for fn in ("gate_up", "rows_axpy"):
        real = getattr(kernels, fn)
        monkeypatch.setattr(kernels, fn, lambda *a, _real=real, **k: calls.append(1) or _real(*a, **k))
    masked = _decode(model, ids, 3, lambda: SparseMLP(model, rule, mode="mask"))
    kernel = _decode(model, ids, 3, lambda: SparseMLP(model, rule, mode="kernel"))
    for m, k in zip(masked, kernel):
        torch.testing.assert_close(k, m, rtol=1e-5, atol=1e-5)
    # llama's MLP (no bias, SiLU) runs the kernels at each decode step; biased and inline MLPs gather's path
    assert bool(calls) == (name == "llama")
