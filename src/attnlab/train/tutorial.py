"""The PyTorch word-language-model tutorial transformer, returning its attention maps.

The Scan&Snap (Fig. 7) and JoMA real-text experiments train this model: token embedding
scaled by √d, sinusoidal positions with dropout, post-LN encoder blocks under a causal mask
(x = LN(x + Attn(x)); x = LN(x + FFN(x)), ReLU FFN), and a linear decoder. Defaults are the
authors': emsize 200, FFN 200, 1 head. The blocks are written out (instead of
``nn.TransformerEncoderLayer``) only so that each returns its attention probabilities; a test
shows the two are the same function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.core.errors import ConfigError
from attnlab.core.nn import PostLNBlock


@dataclass(frozen=True)
class TutorialConfig:
    vocab_size: int
    d_model: int = 200  # emsize
    n_heads: int = 1
    d_ffn: int = 200  # nhid
    n_layers: int = 1
    dropout: float = 0.2
    max_len: int = 5000  # longest sequence the sinusoidal table covers

    def __post_init__(self):
        if min(self.vocab_size, self.d_model, self.n_heads, self.d_ffn, self.n_layers, self.max_len) < 1:
            raise ConfigError("vocab_size, d_model, n_heads, d_ffn, n_layers and max_len must all be >= 1")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout}: use a value in [0, 1)")


def sinusoidal_positions(max_len: int, d: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^{2i/d}), PE[p, 2i+1] = cos(...). -> (max_len, d)."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq[: d // 2])
    return pe


class TutorialTransformer(nn.Module):
    def __init__(self, cfg: TutorialConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_len, cfg.d_model), persistent=False)
        self.pos_dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(PostLNBlock(cfg.d_model, cfg.n_heads, cfg.d_ffn, cfg.dropout)
                                    for _ in range(cfg.n_layers))
        self.decoder = nn.Linear(cfg.d_model, cfg.vocab_size)
        # the tutorial's init: U(±0.1) embedding and decoder, zero decoder bias
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, x: torch.Tensor, attentions: bool = True) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """x: (B, T) token ids -> logits (B, T, V) and per-layer attention [(B, H, T, T)] (the maps
        cost nothing extra here, so they are returned whatever ``attentions`` says)."""
        t = x.shape[1]
        if t > self.cfg.max_len:
            raise ConfigError(f"sequence of {t} tokens exceeds max_len={self.cfg.max_len}")
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)  # causal: no peeking ahead
        h = self.pos_dropout(self.encoder(x) * math.sqrt(self.cfg.d_model) + self.pe[:t])
        maps = []
        for layer in self.layers:
            h, a = layer(h, mask)
            maps.append(a)
        return self.decoder(h), maps
