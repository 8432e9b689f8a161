"""What the page shows of one dense forward: every head's attention map (quantised and packed as it
arrives, a layer at a time), each head's sink share and entropy, and H2O's accumulated attention."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlab.core.metrics import attention_entropy, received_attention, sink_share
from attnlab.models import arch
from attnlab.models.trace import Trace
from attnlab.view.pack import BlobWriter, pack_heads, quantise


@dataclass
class Capture:
    """Per layer (L) and query head (H) or KV head (H_kv); T tokens."""

    n_sink: int  # the first tokens whose share of the accumulated attention is reported
    mask: BlobWriter = field(default_factory=BlobWriter)  # the maps' nonzero flags (see pack.pack_heads)
    values: BlobWriter = field(default_factory=BlobWriter)  # and their values
    counts: list[int] = field(default_factory=list)  # nonzeros per head, layer-major
    scale: list[list[float]] = field(default_factory=list)  # (L, H) each head's quantisation scale
    sink: list[list[float]] = field(default_factory=list)  # (L, H) mean share of a row on token 0 (rows 1..T-1)
    entropy: list[list[float]] = field(default_factory=list)  # (L, H) mean row entropy, nats (rows 1..T-1)
    accumulated: list[torch.Tensor] = field(default_factory=list)  # L x (H_kv, T) H2O's score, no eviction

    def see(self, p: torch.Tensor, n_kv: int) -> None:
        """One layer's attention p: (H, T, T)."""
        h, t, _ = p.shape
        full = p.double()
        rows = full[:, 1:] if t > 1 else full  # row 0 sees only itself: share 1, entropy 0, always
        self.sink.append(sink_share(rows).mean(-1).tolist())
        self.entropy.append(attention_entropy(rows).mean(-1).tolist())
        # H2O's accumulated attention: per KV head, over the query heads of its group (adjacent, as repeat_kv)
        self.accumulated.append(received_attention(full.reshape(n_kv, (h // n_kv) * t, t)))
        q, scale = quantise(p)
        mask, values, counts = pack_heads(q)
        self.mask.write(mask)
        self.values.write(values)
        self.counts += counts
        self.scale.append(scale.tolist())

    def first_share(self) -> list[list[float]]:
        """(L, H_kv) the share of the accumulated attention held by the first ``n_sink`` tokens."""
        return [(a[:, :self.n_sink].sum(-1) / a.sum(-1)).tolist() for a in self.accumulated]


@torch.no_grad()
def capture(model: torch.nn.Module, ids: torch.Tensor, n_sink: int = 4, progress=None) -> Capture:
    """One forward of ids (T,) with every layer's attention pattern traced: a :class:`Capture`."""
    n_kv = arch.dims(model).n_kv_heads
    out = Capture(n_sink)

    def on(name: str, pattern: torch.Tensor) -> None:  # (1, H, T, T), one layer at a time, in order
        out.see(pattern[0].cpu(), n_kv)
        if progress is not None:
            progress.update(1)

    with Trace(model, ["blocks.*.attn.pattern"], on=on):
        model(ids[None].to(model.device))
    return out
