"""Every registered probe follows its input's device: fed the tensors of a real stream as tensors on the
stand-in accelerator (tests/accelerator.py), it neither mixes devices (which crashed every probe on an
H100) nor changes a number. Parametrised over the registry, so a new probe is checked the day it registers."""
import json

import pytest
import torch

from accelerator import accelerator, on_accel
from attnlab.probes.base import Probe, make_probes
from attnlab.probes.run import load_probes
from attnlab.probes.stream import stream
from tiny_models import random_ids

NAMES = load_probes()


class _Recorder(Probe):
    """Keeps a copy of every tensor a probe would see."""

    def __init__(self, needs):
        self.needs, self.calls = needs, []

    def see(self, name, t, start):
        self.calls.append((name, t.clone(), start))

    def result(self):
        return {}


def _fed(probe: Probe, model, ids, calls, wrap) -> dict:
    probe.attach(model, ids)
    for name, t, start in calls:
        probe.see(name, wrap(t), start)
    return probe.result()


@pytest.mark.parametrize("name", NAMES)
def test_a_probe_follows_its_inputs_device(tiny_models, name):
    model, ids = tiny_models["llama"], random_ids(96, seed=1)
    probe = make_probes([name])[0]
    rec = _Recorder(probe.needs)
    stream(model, ids, [rec], chunk=32, window=48 if probe.windowed else None)
    on_cpu = _fed(make_probes([name])[0], model, ids, rec.calls, lambda t: t)
    with accelerator():
        elsewhere = _fed(probe, model, ids, rec.calls, on_accel)
    assert json.dumps(elsewhere, sort_keys=True) == json.dumps(on_cpu, sort_keys=True)


def test_the_stand_in_raises_where_cuda_does():
    """The checker itself: today's crash (a CPU accumulator fed an accelerator tensor) raises; an
    accumulator made from its input, a 0-dim CPU scalar and CPU indices pass."""
    x = on_accel(torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="same device"):
        torch.zeros(4).add_(x.sum(0))
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(4)
    with pytest.raises(TypeError, match="numpy"):
        x.numpy()
    acc = x.new_zeros(4)
    acc += x.sum(0) * torch.tensor(2.0)
    assert acc.device == x.device != torch.device("cpu") and torch.equal(acc.cpu(), 2 * x.cpu().sum(0))
    assert torch.equal(x[torch.tensor([0, 2])].cpu(), x.cpu()[[0, 2]])
    with accelerator():
        assert torch.arange(3, device=x.device).device == x.device
