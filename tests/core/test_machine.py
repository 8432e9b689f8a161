"""core.machine: the line every run's metrics.json carries names the CPU, and the GPU first when a CUDA device ran
it (the device's kernels decide the rounding)."""
import torch

from attnlab.core import machine as machine_mod


def test_a_cpu_run_names_the_cpu_its_kernels_isa_threads_and_torch():
    line = machine_mod.machine()
    assert line.startswith(f"{machine_mod.cpu_name()} ({torch.backends.cpu.get_cpu_capability()}), ")
    assert f"{torch.get_num_threads()} torch threads" in line and line.endswith(f"torch {torch.__version__}")


def test_a_cuda_run_names_its_gpu_before_the_cpu(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: asked.append(d) or "Some GPU 80GB")
    line = machine_mod.machine("cuda:1")
    assert line == "Some GPU 80GB on " + machine_mod.machine() and asked == [torch.device("cuda:1")]
