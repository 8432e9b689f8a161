"""The machine a number was measured on: its CPU as /proc names it, its cores, torch's threads and version.

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
    """This CPU, its cores and torch's threads and version, in one line; for a CUDA ``device`` its GPU first
    (the GPU's kernels then decide the rounding, not the CPU's)."""
    import torch  # here, not at the top: `attnlab --help` need not load PyTorch

    gpu = f"{torch.cuda.get_device_name(torch.device(device))} on " if device.startswith("cuda") else ""
    return (f"{gpu}{cpu_name()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
            f"torch {torch.__version__}")
