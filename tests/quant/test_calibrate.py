"""A calibrated scheme (SmoothQuant): the maxima it reads, entered by QuantizedWeights and as a method."""
import pytest
import torch

import attnlab
from attnlab.core import w8a8, weights
from attnlab.core.errors import UsageError
from attnlab.models import arch
from attnlab.quant.calibrate import input_maxima
from attnlab.quant.transform import QuantizedWeights, projections
from tiny_models import ARCHS, byte_tokenizer, random_ids, tiny, tiny_llama

T = 12


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_the_lm_heads_maxima_are_the_final_hidden_states_largest():
    model, ids = tiny("llama"), random_ids(T, seed=2)
    head = arch.lm_head(model)
    with torch.no_grad():  # the last hidden state is the final norm's output: the head's input
        final = model(ids[None], output_hidden_states=True).hidden_states[-1][0]
    got = input_maxima(model, [head], ids, window=T)
    torch.testing.assert_close(got[head], final.abs().amax(0))
    assert not head._forward_pre_hooks  # the hooks are gone


@pytest.mark.parametrize("name", ARCHS)
def test_windows_are_separate_forwards_and_every_projection_is_seen(name):
    model, ids = tiny(name), random_ids(T, seed=4)
    projs = projections(model)
    whole = input_maxima(model, projs, ids, window=4)
    parts = [input_maxima(model, projs, ids[i:i + 4], window=4) for i in range(0, T, 4)]
    assert set(whole) == set(projs)
    for p in projs:
        torch.testing.assert_close(whole[p], torch.stack([part[p] for part in parts]).amax(0))
        assert whole[p].shape == (arch.weight(p).shape[1],) and not p._forward_pre_hooks


def test_calibration_stops_cleanly_when_the_model_raises():
    model = tiny("llama")
    projs = projections(model)
    with pytest.raises(IndexError):
        input_maxima(model, projs, torch.tensor([10 ** 6]))  # no such token
    assert not any(p._forward_pre_hooks for p in projs)


@pytest.mark.parametrize("name", ARCHS)
def test_each_projection_computes_its_smoothed_product_and_the_model_is_restored(name):
    model, ids, calib = tiny(name), random_ids(T)[None], random_ids(16, seed=7)
    before, state = _logits(model, ids), {k: v.clone() for k, v in model.state_dict().items()}
    x_max = input_maxima(model, projections(model), calib)  # the float model's, before quantizing
    with QuantizedWeights(model, "smoothquant", calibration=calib):
        for p in projections(model):
            w = weights.of(p)
            assert torch.equal(w.smooth, w8a8.smoothing(x_max[p], arch.weight(p)))
            x = torch.randn(3, arch.weight(p).shape[1])
            torch.testing.assert_close(p(x), w8a8.smoothquant(arch.weight(p), x_max[p]).linear(x, p.bias))
        assert not torch.equal(_logits(model, ids), before)
    assert torch.equal(_logits(model, ids), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_without_a_calibration_text_it_is_one_line_naming_the_fix():
    model = tiny("llama")
    with pytest.raises(UsageError, match="smoothquant calibrates on a text: enter it as --method smoothquant") as e:
        QuantizedWeights(model, "smoothquant")
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match="give the model's tokenizer"):
        with attnlab.apply(model, "smoothquant"):
            pass
    assert not any(hasattr(p, weights.ATTR) for p in projections(model))


def test_the_method_calibrates_on_its_text_as_quantizedweights_does_by_hand(tmp_path):
    text = tmp_path / "calib.txt"
    text.write_text("the cat sat on the mat and the dog ran to the cat. " * 4)
    model, tok, ids = tiny_llama(), byte_tokenizer(), random_ids(T)[None]
    calib = torch.tensor(tok(text.read_text())["input_ids"][:40])
    with QuantizedWeights(model, "smoothquant", calibration=calib):
        by_hand = _logits(model, ids)
    with attnlab.apply(model, f"smoothquant:calibration={text},calibration_tokens=40", tokenizer=tok):
        assert torch.equal(_logits(model, ids), by_hand)
