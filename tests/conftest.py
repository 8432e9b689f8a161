import os

# Triton (where installed) runs the sparse MLP's GPU kernels on CPU tensors, in its interpreter: set before
# anything imports Triton, whose standard-library functions are compiled for the interpreter only then
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("MPLBACKEND", "Agg")
# No test downloads: a model not in the (test's) cache is refused, not fetched. The tests of fetching on
# first use delete this and fake the fetch.
os.environ["ATTNLAB_OFFLINE"] = "1"
# The tests' tensors are tiny: one thread each, so the suite's time does not depend on how busy the machine
# is (a second thread that waits on a loaded machine spins and makes tiny ops 10-20x slower). Results are
# compared within one process, so the thread count changes no assertion.
torch.set_num_threads(1)


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
