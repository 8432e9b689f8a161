"""A layer's slots as the steady step writes them, shared by the eager evicting layer (:mod:`attnlab.kv.layer`)
and its compiled steady twin (:mod:`attnlab.kv.steady`): how slot indices lay out over a per-slot tensor, and
the one write a steady step makes (the new token into the evicted slot). Torch only."""
from __future__ import annotations

import torch


def per_slot(index: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Slot indices (B, H, n) laid out for gathering or scattering whole slots of ``t`` (B, H, S, ...): a score
    kept per slot as several numbers (SnapKV's window) moves as one."""
    extra = t.shape[3:]
    return index.view(*index.shape, *(1,) * len(extra)).expand(*index.shape, *extra)


def overwrite(layer, evict: torch.Tensor, key_states: torch.Tensor, value_states: torch.Tensor,
              seen: int | torch.Tensor) -> None:
    """Write the step's one new token into slot ``evict`` (B, H, 1) of ``layer``'s keys and values (B, H, S, D),
    its ``pos`` (B, H, S) and its ``score`` (None: no scores): the key and value (B, H, 1, D), the stream index
    ``seen`` (an int, or a () tensor inside a compiled graph, where an int would be a constant of the graph)
    and a score of 0."""
    d_idx = evict[..., None]  # (B, H, 1, 1)
    layer.keys.scatter_(2, d_idx.expand(-1, -1, -1, layer.keys.shape[-1]), key_states)
    layer.values.scatter_(2, d_idx.expand(-1, -1, -1, layer.values.shape[-1]), value_states)
    layer.pos.scatter_(2, evict, seen if isinstance(seen, int) else seen.expand_as(evict))
    if layer.score is not None:
        layer.score.scatter_(2, per_slot(evict, layer.score), 0.0)
