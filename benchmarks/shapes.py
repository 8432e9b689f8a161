"""Real model configs for randomly initialised stand-ins: a GPU machine lent to a session may reach no
model hub and carries at most a few tens of MB across, so benchmarks and the GPU smoke test build a model
of a real config with fresh weights. Numbers that depend on what the weights learned mean nothing on
such a model; speed and "does it run" do. Imported as ``shapes`` (the benchmarks run as scripts)."""
from __future__ import annotations

# SmolLM2-135M: 30 layers, d 576, 9 query / 3 KV heads, SwiGLU 1,536, tied embeddings
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
               pad_token_id=0)  # <|endoftext|> is id 0, as in SmolLM2's tokenizer
CONFIGS = {"smollm2": SMOLLM2}


def random_llama(name: str = "smollm2", **overrides):
    """A LlamaForCausalLM of config ``name`` (``overrides`` replace fields: fewer layers, say), seed 0, eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**CONFIGS[name], **overrides})).eval()
