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
# Llama-3-8B: 32 layers, d 4,096, 32 query / 8 KV heads, SwiGLU 14,336, untied 128,256-token embeddings
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rms_norm_eps=1e-5,
                 rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001)
CONFIGS = {"smollm2": SMOLLM2, "llama3-8b": LLAMA3_8B}


def random_llama(name: str = "smollm2", device: str = "cpu", dtype=None, **overrides):
    """A LlamaForCausalLM of config ``name`` (``overrides`` replace fields: fewer layers, say), seed 0, eval mode,
    built on ``device`` in ``dtype`` (default float32): an 8B model is built on the GPU in bfloat16, never in
    float32 on the host first."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)
    try:
        with torch.device(device):
            return LlamaForCausalLM(LlamaConfig(**{**CONFIGS[name], **overrides})).eval()
    finally:
        torch.set_default_dtype(before)
