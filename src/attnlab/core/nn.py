"""Neural-network parts shared by the theory and training halves: the post-LN encoder block.

:class:`PostLNBlock` is the original Transformer's block (LayerNorm *after* each residual)::

    x = LayerNorm(x + MultiHeadSelfAttention(x))      masked keys get -inf
    h = ReLU(x W1 + b1)                                (B, T, F): the FFN activations
    x = LayerNorm(x + h W2 + b2)

Parameter names follow ``nn.TransformerEncoderLayer`` so weights map 1:1 (the training half's
tutorial model is checked against it). The JoMA hierarchy transformer uses it with dropout 0
and a key-padding mask; the tutorial model with dropout and a causal mask.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class PostLNBlock(nn.Module):
    """One post-LN encoder block that returns its attention probabilities (and, via
    :meth:`trace`, its FFN activations)."""

    def __init__(self, d: int, heads: int, d_ffn: int, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        self.linear1, self.linear2 = nn.Linear(d, d_ffn), nn.Linear(d_ffn, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        # p = 0 dropout is the identity and draws no random numbers
        self.dropout, self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, d); mask: bool, True = blocked, broadcastable to (B, H, T, T)
        -> (B, T, d), attention (B, H, T, T)."""
        x, _, a = self.trace(x, mask)
        return x, a

    def trace(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`forward`, also returning the FFN activations after ReLU: -> out, h (B, T, F), attention."""
        b, t, d = x.shape
        q, k, v = self.in_proj(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, T, dh)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)  # (B, H, T, T)
        a = scores.masked_fill(mask, float("-inf")).softmax(-1)
        ctx = (self.dropout(a) @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, d)
        x = self.norm1(x + self.dropout1(self.out_proj(ctx)))
        h = torch.relu(self.linear1(x))  # (B, T, F)
        x = self.norm2(x + self.dropout2(self.linear2(self.dropout(h))))
        return x, h, a
