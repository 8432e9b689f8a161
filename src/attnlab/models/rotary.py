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
    _cos_sin: dict = field(default_factory=dict, compare=False, repr=False)  # int delta -> (cos, sin), (1, rot)

    @classmethod
    def of(cls, model: torch.nn.Module) -> "RopeSpec":
        """The frequencies ``model``'s rotary module holds now (a scaling applied around it included)."""
        mods = arch.rotary_modules(model)
        if not mods:
            raise UsageError(f"{model.config.model_type} has learned absolute positions: it has no RoPE rotation")
        inv = mods[0].inv_freq.detach().float().clone()
        return cls(inv, 2 * inv.numel())

    def rotate(self, k: torch.Tensor, delta: torch.Tensor | int) -> torch.Tensor:
        """k (n, D) rotated by delta (n,) positions (or one int for all), in float32; rotate_half
        layout (Llama, NeoX): dims (i, i + rot/2) pair up, (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
        d = k.shape[-1]
        if isinstance(delta, int):  # steady decoding rotates by 1: its cos/sin are computed once
            if (delta, d) not in self._cos_sin:
                self._cos_sin[delta, d] = self._angles(torch.tensor([delta]), d)
            cos, sin = (t.to(k.device) for t in self._cos_sin[delta, d])
        else:
            cos, sin = self._angles(delta.to(k.device), d)
        # Why three ops and not rotate_half's cat: the cache re-rotates hundreds of keys per layer every step
        # (H2O with rolling positions), and each full-size temporary is one more pass over them.
        x, half = k.float(), self.rot_dims // 2
        out = x * cos  # (n, D); cos is 1 past rot_dims, so unrotated dims pass through
        out[:, :half].addcmul_(x[:, half:self.rot_dims], sin, value=-1)
        out[:, half:self.rot_dims].addcmul_(x[:, :half], sin)
        return out.to(k.dtype)

    def _angles(self, delta: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos (n, d), 1 past rot_dims, and sin (n, rot/2) of delta (n,) positions."""
        ang = delta.to(torch.float32)[:, None] * self.inv_freq.to(delta.device)  # (n, rot/2)
        cos = ang.cos()
        return torch.cat([cos, cos, cos.new_ones(len(delta), d - self.rot_dims)], -1), ang.sin()
