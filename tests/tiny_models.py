"""Tiny random models built from configs (no network): one place for every test that needs one."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def tiny_llama(seed=0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, bos_token_id=256, eos_token_id=256)
    return LlamaForCausalLM(cfg).eval()


def byte_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models as tm, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(tm.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def save_gpt2(folder):
    """A tiny GPT-2 folder (learned absolute positions, no RoPE) with the byte tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=2, n_positions=128)).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def save_hf(folder, seed=0, tokenizer=True):
    tiny_llama(seed).save_pretrained(folder)
    if tokenizer:
        byte_tokenizer().save_pretrained(folder)
    return folder
