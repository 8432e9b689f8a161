"""The rotation a model's RoPE applies, read off its rotary module (to re-rotate cached keys), and
the mark a length-dependent RoPE scaling leaves on that module while it is applied."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.core.errors import UsageError
from attnlab.models import arch

DYNAMIC_FLAG = "attnlab_dynamic_rope"  # set on rotary modules while a dynamic scaling is active


def is_dynamic(model: torch.nn.Module) -> bool:
    """True while a scaling whose frequencies follow the length (dynamic NTK) is applied to ``model``."""
    return any(getattr(m, DYNAMIC_FLAG, False) for m in arch.rotary_modules(model))


@dataclass(frozen=True)
class RopeSpec:
    """The rotation a model's RoPE applies: angle = position × inv_freq on the first rot_dims dims."""

    inv_freq: torch.Tensor  # (rot_dims / 2,) float32
    rot_dims: int
    # (what, device) -> made once per device (see _made): (int delta, D) -> its (cos, sin); ("table", most, D) ->
    # those of 0..most; ("turns", m, D) -> turn_back's (D, m*D) matrices
    _cos_sin: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, model: torch.nn.Module) -> "RopeSpec":
        """The frequencies ``model``'s rotary module holds now (a scaling applied around it included)."""
        mods = arch.rotary_modules(model)
        if not mods:
            raise UsageError(f"{model.config.model_type} has learned absolute positions: it has no RoPE rotation")
        inv = mods[0].inv_freq.detach().float().clone()
        return cls(inv, 2 * inv.numel())

    def rotate(self, k: torch.Tensor, delta: torch.Tensor | int, most: int | None = None) -> torch.Tensor:
        """k (n, D) rotated by delta (n,) positions (or one int for all), in float32; rotate_half
        layout (Llama, NeoX): dims (i, i + rot/2) pair up, (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
        ``most``: every delta lies in 0..most, so its cos/sin are rows of a table made once."""
        d, dev = k.shape[-1], k.device
        if isinstance(delta, int):  # steady decoding rotates by 1: its cos/sin are computed once
            cos, sin = self._made((delta, d), dev, lambda: self._angles(torch.tensor([delta]), d))
        elif most is not None:  # a table lookup: cos and sin of thousands of rows cost more than the rotation
            table = self._made(("table", most, d), dev, lambda: self._angles(torch.arange(most + 1), d))
            cos, sin = (t[delta.to(dev)] for t in table)
        else:
            cos, sin = self._angles(delta.to(dev), d)
        # Why three ops and not rotate_half's cat: the cache re-rotates hundreds of keys per layer every step
        # (H2O with rolling positions), and each full-size temporary is one more pass over them.
        x, half = k.float(), self.rot_dims // 2
        out = x * cos  # (n, D); cos is 1 past rot_dims, so unrotated dims pass through
        out[:, :half].addcmul_(x[:, half:self.rot_dims], sin, value=-1)
        out[:, half:self.rot_dims].addcmul_(x[:, :half], sin)
        return out.to(k.dtype)

    def turn_back(self, x: torch.Tensor, m: int) -> torch.Tensor:
        """x (n, D) rotated back by 0, 1, ..., m - 1 positions -> (n, m, D): one matmul with the rotations'
        matrices (rotate is linear in each row, so rotate(I, -o) is its matrix), made once per (m, D)."""
        d = x.shape[-1]
        turns = self._made(("turns", m, d), x.device,  # (D, m*D): block o turns back by o
                           lambda: torch.cat([self.rotate(torch.eye(d), -o) for o in range(m)], 1))
        return (x.float() @ turns).view(-1, m, d).to(x.dtype)

    def _made(self, key: tuple, device: torch.device, make):
        """What ``make()`` gives (a tensor or a tuple of them), made once per key and kept on ``device``: a
        decode step calls this per layer, and a copy to the GPU per call is a transfer per call."""
        if (key, device) not in self._cos_sin:
            made = make()
            self._cos_sin[key, device] = made.to(device) if torch.is_tensor(made) else tuple(t.to(device) for t in made)
        return self._cos_sin[key, device]

    def _angles(self, delta: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos (n, d), 1 past rot_dims, and sin (n, rot/2) of delta (n,) positions."""
        ang = delta.to(torch.float32)[:, None] * self.inv_freq.to(delta.device)  # (n, rot/2)
        cos = ang.cos()
        return torch.cat([cos, cos, cos.new_ones(len(delta), d - self.rot_dims)], -1), ang.sin()
