"""The tutorial transformer equals the PyTorch tutorial's nn.TransformerEncoder model."""
import math

import pytest
import torch
from torch import nn

from attnlab.core.errors import ConfigError
from attnlab.train.tutorial import TutorialConfig, TutorialTransformer, sinusoidal_positions


def _reference(model: TutorialTransformer) -> nn.TransformerEncoder:
    """The tutorial's encoder (post-LN, ReLU) with our weights copied in."""
    c = model.cfg
    layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ffn, c.dropout)
    enc = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
    for ref, ours in zip(enc.layers, model.layers):
        ref.self_attn.in_proj_weight.data.copy_(ours.in_proj.weight)
        ref.self_attn.in_proj_bias.data.copy_(ours.in_proj.bias)
        ref.self_attn.out_proj.load_state_dict(ours.out_proj.state_dict())
        for name in ("linear1", "linear2", "norm1", "norm2"):
            getattr(ref, name).load_state_dict(getattr(ours, name).state_dict())
    return enc.eval()


@pytest.mark.parametrize("layers,heads", [(1, 1), (3, 2)])
def test_equals_the_tutorial_encoder(layers, heads):
    torch.manual_seed(0)
    model = TutorialTransformer(TutorialConfig(vocab_size=50, d_model=16, n_heads=heads, d_ffn=24,
                                               n_layers=layers)).eval()
    enc = _reference(model)
    x = torch.randint(0, 50, (3, 11))  # (B, T)
    logits, maps = model(x)
    # the tutorial runs sequence-first: (T, B, d)
    src = (model.encoder(x) * math.sqrt(16) + model.pe[:11]).transpose(0, 1)
    mask = nn.Transformer.generate_square_subsequent_mask(11)
    want = model.decoder(enc(src, mask).transpose(0, 1))
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    assert len(maps) == layers and maps[0].shape == (3, heads, 11, 11)


def test_attention_maps_are_causal_distributions():
    model = TutorialTransformer(TutorialConfig(vocab_size=20, d_model=8, n_layers=2)).eval()
    _, maps = model(torch.randint(0, 20, (2, 9)))
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 1, 9))
        assert (a.triu(1) == 0).all()  # no attention to future tokens
        assert torch.equal(a[..., 0, 0], torch.ones(2, 1))  # the first token sees only itself


def test_future_tokens_do_not_change_the_past():
    model = TutorialTransformer(TutorialConfig(vocab_size=20, d_model=8)).eval()
    x = torch.randint(0, 20, (1, 10))
    y = x.clone()
    y[0, 6:] = (y[0, 6:] + 1) % 20
    torch.testing.assert_close(model(x)[0][:, :6], model(y)[0][:, :6])


def test_sinusoidal_positions():
    pe = sinusoidal_positions(50, 6)
    assert torch.equal(pe[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))
    torch.testing.assert_close(pe[7, 2], torch.tensor(math.sin(7 / 10000 ** (2 / 6))))
    torch.testing.assert_close(pe[7, 3], torch.tensor(math.cos(7 / 10000 ** (2 / 6))))


def test_config_errors():
    with pytest.raises(ConfigError, match="divisible"):
        TutorialConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ConfigError, match="dropout"):
        TutorialConfig(vocab_size=10, dropout=1.0)
    with pytest.raises(ConfigError, match=">= 1"):
        TutorialConfig(vocab_size=0)
