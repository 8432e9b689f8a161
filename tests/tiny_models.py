"""Tiny random models built from configs (no network): the one place every test gets one.

``tiny(arch, seed=0, **config_overrides)`` builds one of four architectures in eval mode:
llama (grouped-query attention, as SmolLM2), gpt_neox (partial rotary: half of each head rotates),
gpt2 and opt (learned absolute positions). ``seed=None`` leaves the global RNG as it is.
"""
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedTokenizerFast,
)

from attnlab.models.trace import Trace

V = 64  # vocabulary of the default tiny models

CONFIGS = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256)),
    "gpt_neox": (GPTNeoXConfig, GPTNeoXForCausalLM, dict(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        rotary_pct=0.5, max_position_embeddings=256)),
    "gpt2": (GPT2Config, GPT2LMHeadModel, dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=256)),
    "opt": (OPTConfig, OPTForCausalLM, dict(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
        max_position_embeddings=256, word_embed_proj_dim=32)),
}
ARCHS = tuple(CONFIGS)
ROPE_ARCHS = ("llama", "gpt_neox")


def random_ids(n: int, seed: int = 0, vocab: int = V) -> torch.Tensor:
    """(n,) token ids drawn uniformly from a seeded generator (the global RNG untouched)."""
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def traced(model, ids: torch.Tensor, names):
    """The Trace of ``names`` after one forward of ``ids`` (T,) as a batch of one."""
    with Trace(model, names) as tr:
        model(ids[None])
    return tr


def tiny(arch: str, seed: int | None = 0, **config_overrides):
    """A tiny random ``arch`` model in eval mode; ``config_overrides`` replace the config's defaults."""
    config_cls, model_cls, defaults = CONFIGS[arch]
    if seed is not None:
        torch.manual_seed(seed)
    return model_cls(config_cls(**{**defaults, **config_overrides})).eval()


def tiny_llama(seed=0) -> LlamaForCausalLM:
    """The llama that the byte tokenizer fits (300 tokens, 256 = end of text), tied embeddings."""
    return tiny("llama", seed, vocab_size=300, max_position_embeddings=64, tie_word_embeddings=True,
                bos_token_id=256, eos_token_id=256)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tm

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(tm.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def save_gpt2(folder):
    """A tiny GPT-2 folder (learned absolute positions, no RoPE) with the byte tokenizer."""
    tiny("gpt2", None, vocab_size=300, n_layer=1, n_head=2, n_positions=128).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def save_hf(folder, seed=0, tokenizer=True):
    """A tiny llama folder (:func:`tiny_llama`), with the byte tokenizer unless ``tokenizer=False``."""
    tiny_llama(seed).save_pretrained(folder)
    if tokenizer:
        byte_tokenizer().save_pretrained(folder)
    return folder


EVAL_TEXT = "the cat sat on the mat and the dog ran to the cat. "
OTHER_TEXT = "a bird flew over the river while the fish swam below it. "


def texts_and_cache(tmp_path, monkeypatch, repeat: int = 8):
    """Two made-up texts (to evaluate on, and to calibrate or train on) and the attnlab cache under tmp_path."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text(EVAL_TEXT * repeat)
    (tmp_path / "other.txt").write_text(OTHER_TEXT * repeat)
    return tmp_path / "text.txt", tmp_path / "other.txt"
