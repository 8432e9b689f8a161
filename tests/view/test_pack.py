"""The page's data format: 8-bit quantisation within its bound, the sparse column-order packing and the blobs
read back exactly, the kept-set bitsets."""
import numpy as np
import pytest
import torch

from attnlab.view.pack import bitsets, blob, dequantise, pack_heads, quantise, unblob, unpack_head


def causal_maps(h: int, t: int, seed: int = 0, sharp: float = 4.0) -> torch.Tensor:
    """(h, t, t) softmax rows under a causal mask: many entries round to 0 at 8 bits, as real heads' do."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(h, t, t, generator=g) * sharp
    return logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def test_quantisation_error_is_at_most_half_a_step_of_each_heads_scale():
    a = causal_maps(3, 20) * torch.tensor([1.0, 0.5, 0.01])[:, None, None]  # heads of very different scales
    q, scale = quantise(a)
    assert q.dtype == torch.uint8 and torch.allclose(scale, a.amax((-1, -2)))
    for h in range(3):
        back = dequantise(q[h].numpy(), float(scale[h]))
        assert np.abs(back - a[h].double().numpy()).max() <= float(scale[h]) / 510 + 1e-9
    assert int(q.max()) == 255  # each head's largest weight uses the top code


@pytest.mark.parametrize("t", [1, 7, 33])
def test_packed_heads_unpack_to_the_quantised_maps(t):
    q, _ = quantise(causal_maps(4, t, seed=t))
    mask, values, counts = pack_heads(q)
    assert counts == (q > 0).sum((-1, -2)).tolist() and len(values) == sum(counts)
    assert len(mask) == 4 * ((t * (t + 1) // 2 + 7) // 8)
    for h in range(4):
        assert np.array_equal(unpack_head(mask, values, counts, h, t), q[h].numpy())


def test_blobs_round_trip_and_never_hold_a_character_that_closes_a_script():
    data = bytes(range(256)) * 40 + b"</script><!--"
    b = blob(data)
    assert unblob(b) == data and len(b["z"]) % 5 == 0
    assert not set("<\"\\") & set(b["z"])  # safe inside the page's JSON and its script element


def test_bitsets_pack_most_significant_bit_first():
    kept = torch.zeros(2, 10, dtype=torch.bool)
    kept[0, 0] = kept[0, 9] = kept[1, 3] = True
    assert bitsets(kept) == bytes([0b10000000, 0b01000000, 0b00010000, 0])
