"""benchmarks/bench_step_profile.py and bench_step_levers.py: the profile files each op under what it is, and the
levers' fused siblings compute what the projections computed apart."""
import pytest
import torch

from attnlab.models import arch
from attnlab.quant.transform import QuantizedWeights
from tiny_models import tiny


def test_the_step_profile_files_each_op_under_what_it_is(load_benchmark):
    """An op reached through the C++ wrapper's shim is the aten op it calls."""
    part = load_benchmark("bench_step_profile").part
    assert part("aten::_int_mm") == part("aoti_torch_cpu__int_mm_out") == "integer products"
    assert part("aten::bmm") == part("aoti_torch_cpu_bmm_out") == "attention"
    assert part("graph_0_cpp_fused__softmax_add_arange") == "fused loops"
    assert part("## Call CompiledFxGraph f34eti43wbjk") == "the graph's call"
    assert part("TorchDynamo Cache Lookup") == part("Pregraph bytecode") == "guards"
    assert part("aten::argmax") == "between steps" and part("aten::empty") == "other"


@pytest.mark.parametrize("scheme", ["w8a8", "int8"])
def test_fused_siblings_give_the_logits_of_the_projections_apart(load_benchmark, scheme):
    levers = load_benchmark("bench_step_levers")
    model = tiny("llama")
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    with QuantizedWeights(model, scheme), torch.no_grad():
        apart = model(ids).logits
        fused = levers.fuse_siblings(model)
        together = model(ids).logits
    assert len(fused) == 2 * len(arch.layers(model))  # q/k/v and gate/up, every layer
    a = arch.attention(model, 0)  # its float weights stay beside the scheme's
    assert fused[0].w.q.shape == (sum(p.weight.shape[0] for p in (a.q, a.k, a.v)), a.q.weight.shape[1])
    torch.testing.assert_close(together, apart, rtol=1e-5, atol=1e-5)
    assert all("forward" not in p.__dict__ for p in model.modules())  # the scheme's exit restored every forward
