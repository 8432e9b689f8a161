"""benchmarks/gpu_sparse_kernel.py's CPU-checkable parts: its StaticCache decoder greedy-decodes exactly as a
plain DynamicCache loop does and starts over on reset (the CUDA graph replays its step); the whole script runs
with --small in Triton's interpreter."""
import pytest
import torch
from transformers import DynamicCache

from tiny_models import tiny


def _greedy(model, prompt, n):
    cache, out = DynamicCache(config=model.config), []
    with torch.no_grad():
        nxt = model(prompt[None], past_key_values=cache).logits[0, -1].argmax()
        for _ in range(n):
            nxt = model(nxt.view(1, 1), past_key_values=cache).logits[0, -1].argmax()
            out.append(int(nxt))
    return out


def test_the_static_cache_decoder_decodes_as_the_plain_loop_and_resets(load_benchmark):
    mod = load_benchmark("gpu_sparse_kernel")
    model = tiny("llama", 0, max_position_embeddings=128)
    prompt = torch.randint(0, 64, (9,), generator=torch.Generator().manual_seed(3))
    d = mod.Decoder(model, prompt, steps=12)
    expected = _greedy(model, prompt, 12)
    assert d.tokens(12, graph=False) == expected
    assert d.tokens(12, graph=False) == expected  # reset: the same again
    assert len(set(expected)) > 1  # not a constant


def test_the_script_runs_small_in_the_interpreter(load_benchmark, tmp_path, capsys):
    pytest.importorskip("triton")
    mod = load_benchmark("gpu_sparse_kernel")
    assert mod.main(["--device", "cpu", "--small", "--steps", "2", "--repeats", "1", "--keeps", "0.5",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "| Deja Vu kernel, keep 0.5 |" in out and "TEAL 50% (x and h): eager" in out
    assert (tmp_path / "r" / "result.json").exists()
