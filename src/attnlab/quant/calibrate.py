"""What a calibrated weight scheme reads: each projection's input units' largest magnitude over a text.

    x_max = input_maxima(model, projs, ids)    # ids (T,) -> {projection: (in,) max |x| over the T tokens}

The float model runs the text in windows of ``window`` tokens (each its own forward from position 0, no KV
cache kept), a forward pre-hook on each projection keeping the running max of |input| per input unit. The hooks
are removed whatever happens. SmoothQuant's statistic (Xiao et al. 2023 calibrate on 512 sentences of the
Pile); :func:`attnlab.core.w8a8.smoothing` turns it into the smoothing factors. Torch only.
"""
from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def input_maxima(model: nn.Module, projs: list[nn.Module], ids: torch.Tensor, window: int = 512,
                 progress=None) -> dict[nn.Module, torch.Tensor]:
    """ids (T,) a calibration text's token ids -> each projection's (in,) float32 max |x| over its tokens."""
    x_max: dict[nn.Module, torch.Tensor] = {}

    def keep(module, args):
        x = args[0].detach()
        seen = x.reshape(-1, x.shape[-1]).abs().amax(0).float()  # (in,)
        x_max[module] = seen if module not in x_max else torch.maximum(x_max[module], seen)

    hooks = [p.register_forward_pre_hook(keep) for p in projs]
    device = next(model.parameters()).device
    try:
        for start in range(0, ids.numel(), window):
            win = ids[start:start + window]
            model(win[None].to(device), use_cache=False)
            if progress is not None:
                progress.update(win.numel())
    finally:
        for h in hooks:
            h.remove()
    return x_max
