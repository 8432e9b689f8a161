"""The coupling meter: each step of z splits exactly into the decoupled part and the coupling; the coupling
vanishes when every class attends alike (b_k = b̄), the case where Theorem 1's softmax invariant is exact."""
import torch

from attnlab.theory.joma.coupling import CouplingMeter, centred_ratio
from attnlab.theory.joma.invariants import record_steps
from attnlab.theory.joma.model import JomaLayer, make_embedding, train

M_C, C, D = 6, 4, 8


def _run(X: torch.Tensor, steps: int = 30):
    """X: (S, C, M_c) per-run inputs. -> (history, meter)."""
    torch.manual_seed(0)
    U = make_embedding("identity", D, M_C).double()
    layer = JomaLayer(U, "softmax", 0.5, "linear", "ce", "none")
    y = torch.arange(C)
    S = X.shape[0]
    W0, z0 = torch.randn(S, D, C, dtype=torch.float64) * 0.1, torch.randn(S, M_C, dtype=torch.float64) * 0.1
    meter = CouplingMeter(layer, X, y, 0.1, record_steps(steps, 5))
    h = train(layer, X, y, W0, z0, 0.1, 0.1, steps, None, record_steps(steps, 5), None, meter)
    meter.finish(steps)
    return h, meter


def test_each_step_of_z_is_the_decoupled_part_plus_the_coupling():
    X = torch.rand(3, C, M_C, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    h, meter = _run(X / X.sum(-1, keepdim=True))
    assert meter.steps == h.steps
    for t, P, Cc in zip(range(len(h.steps)), meter.P_at, meter.C_at):
        torch.testing.assert_close(h.z[t] - h.z[0], P + Cc, atol=1e-12, rtol=0)
    assert centred_ratio(meter.C_at[-1], h.z[-1] - h.z[0]).min() > 0  # classes attend differently: coupled


def test_the_coupling_vanishes_when_every_class_attends_alike():
    row = torch.rand(M_C, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    X = (row / row.sum()).expand(2, C, M_C).contiguous()  # the same context for every class: b_k = b̄
    h, meter = _run(X)
    assert meter.C_at[-1].abs().max() < 1e-15 and (h.z[-1] - h.z[0]).abs().max() > 1e-6
