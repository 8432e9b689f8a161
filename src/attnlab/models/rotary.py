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
        layout (Llama, NeoX)."""
        if isinstance(delta, int):  # steady decoding rotates by 1: its cos/sin are computed once
            if delta not in self._cos_sin:
                self._cos_sin[delta] = self._angles(torch.tensor([delta]))
            cos, sin = (t.to(k.device) for t in self._cos_sin[delta])
        else:
            cos, sin = self._angles(delta.to(k.device))
        rot, rest = k[:, : self.rot_dims].float(), k[:, self.rot_dims:]
        x1, x2 = rot.chunk(2, dim=-1)
        out = (rot * cos + torch.cat([-x2, x1], -1) * sin).to(k.dtype)
        return torch.cat([out, rest], -1) if rest.shape[-1] else out

    def _angles(self, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ang = delta.to(torch.float32)[:, None] * self.inv_freq.to(delta.device)  # (n, rot/2)
        return torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)  # (n, rot) each
