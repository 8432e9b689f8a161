"""Streaming a text in chunks with the KV cache: each chunk's traced tensors are the full forward's rows,
on the four tiny architectures, and the model is left as it was."""
import pytest
import torch

from attnlab.models.trace import Trace
from attnlab.probes.base import Probe
from attnlab.probes.stream import stream
from tiny_models import ARCHS, V

T = 40
NEEDS = ("blocks.*.attn.pattern", "blocks.*.resid_post")


class Recorder(Probe):
    """Keeps copies of what it sees (tests only: a real probe folds each chunk away)."""

    name = "recorder"
    needs = NEEDS

    def __init__(self):
        self.seen = []
        self.attached = None

    def attach(self, model, ids):
        self.attached = ids.numel()

    def see(self, name, t, start):
        self.seen.append((name, start, t.clone()))

    def result(self):
        return {"chunks": len(self.seen)}


def full_forward(model, ids):
    with Trace(model, list(NEEDS)) as tr:
        model(ids[None])
    return {n: tr[n] for n in tr.names}


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, model.config._attn_implementation


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("chunk", [16, 7])
def test_streamed_chunks_see_the_full_forwards_rows(tiny_models, arch, chunk):
    model = tiny_models[arch]
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(1))
    full = full_forward(model, ids)
    rec = Recorder()
    stream(model, ids, [rec], chunk=chunk)
    assert rec.attached == T
    starts = list(range(0, T, chunk))
    assert sorted({s for _, s, _ in rec.seen}) == starts
    assert len(rec.seen) == len(starts) * len(full)  # every hook once per chunk
    for name, start, t in rec.seen:
        rows = full[name][:, :, start:start + chunk] if name.endswith("pattern") else full[name][:, start:start + chunk]
        if name.endswith("pattern"):
            n = min(chunk, T - start)
            assert t.shape == (1, rows.shape[1], n, start + n)  # (1, H, t, S): the whole prefix as keys
            rows = rows[..., :start + n]
        torch.testing.assert_close(t, rows, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_model_is_unchanged_after_a_stream(tiny_models, arch):
    model = tiny_models[arch]
    saved_impl = model.config._attn_implementation
    model.set_attn_implementation("sdpa")  # not eager: the pattern trace must switch and switch back
    def hooks():  # transformers installs its own output-capturing hooks once: compare, don't demand none
        return [(dict(m._forward_hooks), dict(m._forward_pre_hooks)) for m in model.modules()]

    try:
        before, impl = snapshot(model)
        hooks_before = hooks()
        stream(model, torch.arange(20) % V, [Recorder()], chunk=8)
        after, impl_after = snapshot(model)
        assert impl_after == impl == "sdpa"
        assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
        assert hooks() == hooks_before
    finally:
        model.set_attn_implementation(saved_impl)


class Activations(Recorder):
    needs = ("blocks.*.resid_post",)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_windowed_stream_shows_each_window_but_its_first_token(tiny_models, arch):
    model = tiny_models[arch]
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(5))
    probe = Activations()
    stream(model, ids, [probe], window=16)  # windows 0..15, 16..31, 32..39
    seen = [(name, start, t) for name, start, t in probe.seen if name == "blocks.1.resid_post"]
    assert [start for _, start, _ in seen] == [1, 17, 33]
    for _, start, t in seen:
        off = start - 1
        with Trace(model, "blocks.1.resid_post") as tr:  # the window alone, from position 0
            model(ids[None, off:off + 16])
        torch.testing.assert_close(t, tr["blocks.1.resid_post"][:, 1:], rtol=1e-5, atol=1e-5)


def test_attention_probes_are_refused_a_windowed_stream(tiny_models):
    from attnlab.core.errors import UsageError

    with pytest.raises(UsageError, match="cached stream"):
        stream(tiny_models["llama"], torch.arange(20) % V, [Recorder()], window=8)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_chunks_shrink_as_the_prefix_grows_and_still_see_the_full_rows(tiny_models, arch):
    model = tiny_models[arch]
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(7))
    probe = Recorder()
    stream(model, ids, [probe], chunk=16, max_scores=200)  # t x (start + 16) <= 200
    starts = [s for n, s, _ in probe.seen if n == "blocks.0.attn.pattern"]
    sizes = [b - a for a, b in zip(starts, starts[1:] + [T])]
    assert sizes[0] == 12 and sizes[-1] < sizes[0] and sum(sizes) == T  # 200 // 16 = 12, then fewer
    full = full_forward(model, ids)["blocks.0.attn.pattern"]  # (1, H, T, T)
    for n, s, t in probe.seen:
        if n == "blocks.0.attn.pattern":
            torch.testing.assert_close(t, full[:, :, s:s + t.shape[2], :s + t.shape[2]], rtol=1e-5, atol=1e-6)
