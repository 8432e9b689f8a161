"""Decode timing (sparsity.speed): what is fed, what is predicted, and the teacher-forced agreement."""
import contextlib

import torch

from attnlab.sparsity.mlp import SparseMLP
from attnlab.sparsity.rules import Oracle
from attnlab.sparsity.speed import decode_speed, greedy_decode
from tiny_models import tiny


def _setup():
    model = tiny("llama", 0, vocab_size=64)
    with torch.no_grad():  # a loud MLP, so that dropping neurons moves the argmax of a random model
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(50)
    return model, torch.randint(0, 64, (12,), generator=torch.Generator().manual_seed(1))


def test_greedy_decode_feeds_its_own_argmax_and_follow_feeds_the_given_tokens():
    model, prompt = _setup()
    fed, argmax, seconds = greedy_decode(model, prompt, steps=4, context=contextlib.nullcontext, warmup=1)
    assert len(fed) == 5 and len(argmax) == 6 and fed == argmax[:-1] and seconds > 0
    given = [3, 1, 4, 1, 5]
    fed2, argmax2, _ = greedy_decode(model, prompt, steps=4, context=contextlib.nullcontext, warmup=1, follow=given)
    assert fed2 == given and argmax2[0] == argmax[0]  # the prompt's next token does not depend on what is fed
    # fed the same tokens, the same model predicts the same argmax
    _, argmax3, _ = greedy_decode(model, prompt, steps=4, context=contextlib.nullcontext, warmup=1, follow=given)
    assert argmax3 == argmax2


def test_keeping_every_neuron_agrees_on_every_step_and_a_tiny_keep_does_not():
    model, prompt = _setup()
    full = decode_speed(model, prompt, Oracle(1.0), steps=6)
    assert full["top1_agreement"] == 1.0 and full["steps"] == 6
    assert full["speedup"] == full["dense_ms_per_step"] / full["sparse_ms_per_step"]
    low = decode_speed(model, prompt, Oracle(0.02), steps=6)
    assert low["top1_agreement"] < 1.0
    # the sparse run was fed the dense tokens: its argmax stream is its own (differs where it disagrees)
    fed, dense_argmax, _ = greedy_decode(model, prompt, 6, contextlib.nullcontext)
    _, sparse_argmax, _ = greedy_decode(model, prompt, 6, lambda: SparseMLP(model, Oracle(0.02), mode="gather"),
                                        follow=fed)
    assert sum(a == b for a, b in zip(dense_argmax, sparse_argmax)) / len(dense_argmax) == low["top1_agreement"]


def test_skipping_every_mlp_is_undone_on_exit_and_the_ceiling_follows_amdahl():
    from attnlab.sparsity.speed import amdahl, no_mlp

    model, prompt = _setup()
    with torch.no_grad():
        before = model(prompt[None]).logits
        with no_mlp(model):
            skipped = model(prompt[None]).logits
        after = model(prompt[None]).logits
    assert torch.equal(before, after) and not torch.allclose(before, skipped)
    assert amdahl(10.0, 4.0, 1.0) == 1.0 and amdahl(10.0, 4.0, 0.0) == 2.5 and amdahl(10.0, 4.0, 0.5) == 10 / 7
    d = decode_speed(model, prompt, Oracle(0.5), steps=3, repeats=2, keep=0.5)
    assert d["repeats"] == 2 and d["ceiling"] == amdahl(d["dense_ms_per_step"], d["no_mlp_ms_per_step"], 0.5)
    assert d["share_of_gain"] == (d["speedup"] - 1) / (d["ceiling"] - 1)
