"""A small multilayer post-LN transformer encoder-classifier (JoMA §6, Table 1 / Fig. 7), and its training.

Each block is :class:`attnlab.core.nn.PostLNBlock` (the original Transformer's, shared with the
training half's tutorial model), here without dropout and with PAD keys masked out::

    x = LayerNorm(x + MultiHeadSelfAttention(x))      PAD keys masked out
    h = ReLU(x W1 + b1)                                (N, T, F) — returned per layer
    x = LayerNorm(x + h W2 + b2)

Input: token embedding + learned position embedding. Output: logits from the LAST position
(the top-down sequences put their tokens at the end, so the last position always holds a
real token; an all-PAD sequence keeps its last position unmasked), the per-layer FFN hidden
activations after ReLU, and the attention maps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.core.errors import ConfigError
from attnlab.core.nn import PostLNBlock
from attnlab.theory.loop import run_steps


@dataclass(frozen=True)
class TransformerConfig:
    """Model size. The authors use 3 blocks, d = 1024, FFN 400; our CPU default is smaller."""

    d_model: int = 64
    n_heads: int = 4
    d_ffn: int = 256
    n_layers: int = 3

    def __post_init__(self) -> None:
        if min(self.d_model, self.n_heads, self.d_ffn, self.n_layers) < 1:
            raise ConfigError("d_model, n_heads, d_ffn and n_layers must all be >= 1")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                              "pick n_heads dividing d_model")


@dataclass
class TransformerOutput:
    logits: torch.Tensor  # (N, num_classes)
    ffn_hidden: list[torch.Tensor]  # per layer: (N, T, F), after ReLU
    block_out: list[torch.Tensor]  # per layer: (N, T, d), after the block's second LayerNorm
    attention: list[torch.Tensor]  # per layer: (N, heads, T, T), rows sum to 1 over non-pad keys


class PostLNTransformer(nn.Module):
    """Encoder-classifier; ``forward(x, pad=None)`` with x (N, T) long, pad (N, T) bool (default x == pad_id)."""

    def __init__(self, cfg: TransformerConfig, vocab_size: int, seq_len: int, num_classes: int, pad_id: int):
        super().__init__()
        if not 0 <= pad_id < vocab_size:
            raise ConfigError(f"pad_id={pad_id} is outside the vocabulary of {vocab_size}: count PAD in vocab_size")
        self.cfg, self.pad_id = cfg, pad_id
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(PostLNBlock(cfg.d_model, cfg.n_heads, cfg.d_ffn) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.d_model, num_classes)

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> TransformerOutput:
        pad = x == self.pad_id if pad is None else pad
        # a sequence with no tokens at all (possible in the probabilistic tree) keeps its last
        # position as a key, so its softmax stays finite and it is classified from PAD alone
        pad = pad.clone()
        pad[:, -1] &= ~pad.all(1)
        z = self.embed(x) + self.pos[: x.shape[1]]  # (N, T, d)
        mask = pad[:, None, None, :]  # (N, 1, 1, T): PAD keys blocked for every head and query
        hidden, outs, attn = [], [], []
        for block in self.blocks:
            z, h, a = block.trace(z, mask)
            hidden.append(h)
            outs.append(z)
            attn.append(a)
        return TransformerOutput(self.head(z[:, -1]), hidden, outs, attn)


def train_classifier(
    model: PostLNTransformer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    weight_decay: float,
    device: str = "cpu",
    record: Callable[[int], None] | None = None,
    record_at: Iterable[int] = (),
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Adam (L2 ``weight_decay``, as the authors) on the cross-entropy of the logits, one fresh batch
    ``draw() -> (x, pad, y)`` per step. ``record(t)`` runs at the steps in ``record_at``.

    Returns the training loss and accuracy of every step's batch.
    """
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses, accs = [], []

    def update(_t: int) -> None:
        x, pad, y = draw()
        out = model(x.to(device), pad.to(device))
        loss = F.cross_entropy(out.logits, y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        accs.append(float((out.logits.argmax(1).cpu() == y).float().mean()))

    run_steps(steps, update, record, record_at, on_step)
    return losses, accs
