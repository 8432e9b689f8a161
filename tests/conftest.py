import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def tiny_models():
    """The four tiny architectures of tests/tiny_models.py (llama GQA, gpt_neox partial rotary, gpt2,
    opt) with their default configs, built once, eval mode; tests that change a model restore it."""
    from tiny_models import ARCHS, tiny

    return {arch: tiny(arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def byte_tok():
    """A byte-level tokenizer (256 tokens, no merges) that fits tiny_models.tiny_llama()."""
    from tiny_models import byte_tokenizer

    return byte_tokenizer()
