"""Stream a long text through a model in chunks, handing each chunk's traced tensors to the probes.

Each chunk runs with the model's own KV cache of everything before it (the previous output's
``past_key_values``), so attention is the full causal attention over the whole prefix, and a pattern
seen for a chunk of t tokens starting at position ``start`` is (1, H, t, start + t). The probes fold
each tensor into what they keep and let it go: one layer's pattern for one chunk is alive at a time.
The KV cache itself grows with the text (the model needs it to attend): 2 x layers x KV heads x d_h
floats per token, 23 KB for SmolLM2-135M (0.38 GB at 16k tokens). The chunk shrinks as the prefix
grows so that a forward scores at most ``max_scores`` query-key pairs: one chunk's eager attention
(scores and probabilities, heads x chunk x prefix floats each) would otherwise grow with the text —
512 x 16k x 9 heads is 300 MB a tensor — and it, not the probes, was what grew (benchmarks/README.md).

With ``window=W`` the text is instead cut into independent windows of W tokens, each one forward from
position 0 with no cache (a corpus of 100k tokens is far beyond a model's context, and a neuron's top
contexts need no long prefix): constant memory and linear time. Each window's first token is its own
attention sink and is not shown to the probes (they see positions off + 1 .. off + W - 1). Attention
patterns have no absolute positions there, so only activation probes may stream windowed.
"""
from __future__ import annotations

import fnmatch

import torch
from torch import nn

from attnlab.core.errors import UsageError
from attnlab.models.trace import Trace, resolve
from attnlab.probes.base import Probe

# query-key pairs per forward: 151 MB per attention tensor for SmolLM2's 9 heads; chunks of 512 keep their
# size up to ~7,700 tokens and shrink past it (about half of 512 at 16k)
MAX_SCORES = 1 << 22


@torch.no_grad()
def stream(model: nn.Module, ids: torch.Tensor, probes: list[Probe], chunk: int = 512, progress=None,
           window: int | None = None, max_scores: int = MAX_SCORES) -> None:
    """Run ``ids`` (T,) through ``model`` in chunks of ``chunk`` tokens (or, with ``window``, in independent
    windows); every probe sees the hook points it needs, chunk by chunk, in forward order. The model is
    unchanged afterwards (hooks removed, its attention implementation restored)."""
    names = resolve(model, sorted({n for p in probes for n in p.needs}))
    if window is not None and any(n.endswith("attn.pattern") for n in names):
        raise UsageError("attention probes need the cached stream (patterns have no absolute positions in "
                         "independent windows): stream them without window=")
    wants = {n: [p for p in probes if any(fnmatch.fnmatch(n, pat) for pat in p.needs)] for n in names}
    for p in probes:
        p.attach(model, ids)
    device = next(model.parameters()).device
    at = {"start": 0, "skip": 0}  # the current piece's first position shown, rows hidden before it

    def on(name: str, t: torch.Tensor) -> None:
        for p in wants[name]:
            p.see(name, t[:, at["skip"]:], at["start"])

    if window is not None:
        with Trace(model, names, on=on):
            for off in range(0, ids.numel() - 1, window):  # a 1-token tail would show the probes nothing
                piece = ids[None, off:off + window].to(device)  # (1, W)
                at["start"], at["skip"] = off + 1, 1  # the window's first token is its sink: hidden
                model(piece, use_cache=False, logits_to_keep=1)
                if progress is not None:
                    progress.update(piece.shape[1])
        return
    past, start = None, 0
    with Trace(model, names, on=on):
        while start < ids.numel():
            at["start"] = start
            t = min(chunk, max(1, max_scores // (start + chunk)))  # t x (start + t) <= max_scores, near enough
            piece = ids[None, start:start + t].to(device)  # (1, t)
            # logits only for the last position: a chunk's full logits (t x vocab) would be the largest tensor
            out = model(piece, past_key_values=past, use_cache=True, logits_to_keep=1)
            past, start = out.past_key_values, start + piece.shape[1]
            if progress is not None:
                progress.update(piece.shape[1])
