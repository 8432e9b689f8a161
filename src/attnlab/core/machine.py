"""The machine a number was measured on: its CPU as /proc names it and the vector ISA torch's kernels dispatch
to on it, its cores, torch's threads and version.

The ISA is there because a CPU's name can hide it: two hosts that both call themselves "AMD EPYC" ran the same
int8 decode at speeds far apart (benchmarks/results/bench-decode against bench-decode-avx2), and which kernels
PyTorch runs (AVX2, AVX512, ...) is what sets a CPU's int8 and bf16 speed.

Every run and benchmark names it because a run is bit-reproducible only on the same CPU kernels: the same
command, seed and torch on another CPU rounds differently in the last float digit from the first forward pass
on, and training amplifies that (docs/train.md measures how far for ``joma-wikitext``)."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo; elsewhere what the platform says."""
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine(device: str = "cpu") -> str:
    """This CPU (and the ISA torch dispatches to, e.g. AVX2 or AVX512), its cores and torch's threads and version,
    in one line; for a CUDA ``device`` its GPU first (the GPU's kernels then decide the rounding, not the CPU's)."""
    import torch  # here, not at the top: `attnlab --help` need not load PyTorch

    gpu = f"{torch.cuda.get_device_name(torch.device(device))} on " if device.startswith("cuda") else ""
    isa = torch.backends.cpu.get_cpu_capability()
    return (f"{gpu}{cpu_name()} ({isa}), {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
            f"torch {torch.__version__}")
