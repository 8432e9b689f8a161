"""A stand-in accelerator for CPU-only tests: tensors "on" it are CPU tensors of the subclass ``Elsewhere``,
and mixing one with a plain CPU tensor raises what CUDA raises. Why: an accumulator made on the CPU and fed
GPU tensors crashed every probe on an H100 ("Expected all tensors to be on the same device ... cuda:0 and
cpu"), and neither the meta device (adding a meta tensor into a CPU one raises nothing) nor fake tensors
(they have no values, and half the ops ask for a CUDA build) catch it here.

The rules CUDA keeps, and so these: an op whose tensors sit on both devices raises, except that a 0-dim CPU
tensor passes as a scalar, indexing may take CPU indices, and ``copy_``/``to``/``cpu`` move across. A tensor
on the stand-in reports ``.device`` as ``ACCEL``; a factory given that device (``torch.zeros(..,
device=t.device)``, ``x.to(t.device)``) makes a stand-in tensor, under :func:`accelerator`. ``.numpy()``
of a stand-in raises, as it does for a CUDA tensor. Values are real, so data-dependent code runs.

    with accelerator():
        probe.see(name, on_accel(t), start)   # raises where a real GPU would
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

ACCEL = torch.device("meta")  # what ``.device`` of a stand-in tensor says: not "cpu", and never computed on
_CROSSING = {torch.Tensor.copy_, torch.Tensor.to, torch.Tensor.__getitem__, torch.Tensor.__setitem__}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _is_accel(x) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_is_accel(y) for y in x)
    return isinstance(x, (torch.device, str)) and str(x) == str(ACCEL)


def _here(x):
    """``x`` with the stand-in device replaced by the CPU (what the op really runs on)."""
    if isinstance(x, (list, tuple)):
        return type(x)(_here(y) for y in x) if _is_accel(x) else x
    return torch.device("cpu") if _is_accel(x) else x


def _here_kw(kwargs: dict) -> dict:
    return {k: _here(v) for k, v in kwargs.items()}


class Elsewhere(torch.Tensor):
    """A CPU tensor that stands for one on an accelerator (see the module docstring)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:  # a fresh method-wrapper each time: compared, not "is"
            return ACCEL
        if func in (torch.Tensor.numpy, torch.Tensor.__array__):
            raise TypeError("can't convert an accelerator tensor to numpy: use Tensor.cpu() first")
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and _moves_to_cpu(args, kwargs)):
            plain = args[0].as_subclass(torch.Tensor)
            return plain if func is torch.Tensor.cpu else plain.to(*_here(args[1:]), **_here_kw(kwargs))
        if func not in _CROSSING:
            _same_device(func, args, kwargs)
        return super().__torch_function__(func, types, _here(args), _here_kw(kwargs))


def _same_device(func, args, kwargs) -> None:
    """Raise as CUDA does when ``func``'s tensors sit on both devices: a CPU tensor of one or more
    dimensions beside a stand-in one, or a CPU tensor written in place (or ``out=``) from a stand-in one."""
    cpu = [t for t in _tensors([*args, *kwargs.values()]) if not isinstance(t, Elsewhere)]
    name = getattr(func, "__name__", str(func))
    written = kwargs.get("out") if "out" in kwargs else args[0] if name.endswith("_") and not name.endswith(
        "__") or name.startswith("__i") else None
    if any(t.dim() > 0 for t in cpu) or (isinstance(written, torch.Tensor) and not isinstance(written, Elsewhere)):
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{ACCEL} (the stand-in accelerator) and cpu! ({name})")


def _moves_to_cpu(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the CPU as the device."""
    wanted = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, (torch.device, str))]
    return any(torch.device(w) == torch.device("cpu") for w in wanted)


class _Factories(TorchFunctionMode):
    """Factories and moves that name the stand-in device make stand-in tensors."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _is_accel(args) or _is_accel(tuple(kwargs.values())):
            out = func(*_here(args), **_here_kw(kwargs))
            return on_accel(out) if isinstance(out, torch.Tensor) else out
        return func(*args, **kwargs)


@contextlib.contextmanager
def accelerator():
    """Inside: factories that name ``ACCEL`` make stand-in tensors."""
    with _Factories():
        yield


def on_accel(t: torch.Tensor) -> Elsewhere:
    """``t`` moved to the stand-in accelerator (a view of the same values)."""
    return t.as_subclass(Elsewhere)
