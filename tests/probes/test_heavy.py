"""probes.heavy: streamed accumulated attention equals H2O's column sums of the full forward's eager maps
(per KV head, on the four tiny architectures), the top-share equals a hand computation, the heavy-hitter
set is found on a planted pattern, and the model is left as it was."""
import math

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.experiments.claims import Claim
from attnlab.models.trace import Trace
from attnlab.probes.base import PROBES
from attnlab.probes.heavy import HeavyHitterProbe
from attnlab.probes.stream import stream
from tiny_models import ARCHS, V

T = 40
SHARES = (0.05, 0.1, 0.2, 0.5)


def eager_patterns(model, ids):
    """[(H, T, T)] per layer: the full forward's attention maps."""
    with Trace(model, "blocks.*.attn.pattern") as tr:
        model(ids[None])
    return [tr[n][0] for n in tr.names]


def hand_top_share(p: torch.Tensor, share: float, stride: int = 1) -> float:
    """Mean over heads and rows i (every ``stride``-th) of the mass of row i's ceil(share * (i + 1)) largest
    entries."""
    total, rows = 0.0, 0
    for head in p:
        for i, row in enumerate(head):
            if i % stride:
                continue
            k = max(1, math.ceil(round(share * (i + 1), 9)))
            total += float(row[:i + 1].sort(descending=True).values[:k].sum())
            rows += 1
    return total / rows


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, model.config._attn_implementation


@pytest.mark.parametrize("arch, stride", [(a, 1) for a in ARCHS] + [("llama", 3)])
def test_streamed_accumulated_attention_is_h2os_column_sums(tiny_models, arch, stride):
    model = tiny_models[arch]
    ids = torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(2))
    maps = eager_patterns(model, ids)
    weights, impl = snapshot(model)
    probe = HeavyHitterProbe(shares=SHARES, top_share=0.2, heavy=8, recent=8, row_stride=stride)
    stream(model, ids, [probe], chunk=16)  # chunks of 16, 16, 8
    m = probe.result()
    n_kv = model.config.get_text_config().num_key_value_heads if arch == "llama" else maps[0].shape[0]
    for i, p in enumerate(maps):
        h = p.shape[0]
        # H2O's score of a key: its column sum over the queries of the g query heads sharing its KV head
        h2o = p.reshape(n_kv, h // n_kv, T, T).sum(dim=(1, 2))  # (Hkv, T)
        torch.testing.assert_close(probe.acc[i].float(), h2o, rtol=1e-5, atol=1e-5)
        for s in SHARES:
            assert m["top_share"][f"{s:g}"][i] == pytest.approx(hand_top_share(p, s, stride), abs=1e-5)
        heavy = p.sum(dim=(0, 1)).topk(8).indices  # (8,) the layer's heavy hitters
        assert sorted(m["heavy"]["top_positions"][i][:8]) == sorted(heavy.tolist())
    assert m["tokens"] == T and len(m["power_law"]["r2"]) == len(maps)
    assert all(0.0 <= r <= 1.0 for r in m["power_law"]["r2"])
    state, after = snapshot(model)
    assert after == impl and all(torch.equal(state[k], v) for k, v in weights.items())


def planted(start: int, q: int, hot=(0, 1, 20, 30), heads: int = 4) -> torch.Tensor:
    """(1, H, q, start + q) causal rows with weight 100 on the visible hot keys and 1 elsewhere."""
    s = start + q
    w = torch.ones(q, s)
    w[:, [j for j in hot if j < s]] = 100.0
    w = w.masked_fill(torch.arange(s)[None] > torch.arange(start, s)[:, None], 0.0)  # causal
    return (w / w.sum(-1, keepdim=True)).expand(1, heads, q, s)


def test_heavy_hitters_on_a_planted_pattern(tiny_models):
    model = tiny_models["gpt2"]  # 4 heads, 2 layers
    probe = HeavyHitterProbe(n_sink=4, recent=4, heavy=4)
    probe.attach(model, torch.zeros(32, dtype=torch.long))
    for start in (0, 16):  # two chunks
        for layer in (0, 1):
            probe.see(f"blocks.{layer}.attn.pattern", planted(start, 16), start)
    h = probe.result()["heavy"]
    assert [sorted(p[:4]) for p in h["top_positions"]] == [[0, 1, 20, 30]] * 2
    assert h["in_sinks"] == [2, 2]  # keys 0 and 1 are sinks
    assert h["in_recent"] == [1, 1]  # key 30 is among the last 4


def test_claims_follow_the_thresholds(tiny_models):
    probe = HeavyHitterProbe(heavy=4, recent=4)
    probe.attach(tiny_models["gpt2"], torch.zeros(32, dtype=torch.long))
    for start in (0, 16):
        for layer in (0, 1):
            probe.see(f"blocks.{layer}.attn.pattern", planted(start, 16), start)
    m = probe.result()
    claims = probe.claims(m)
    assert all(isinstance(c, Claim) for c in claims)
    [top] = [c for c in claims if "top 20%" in c.claim and c.status != "finding"]
    assert top.measured == sum(x > 0.5 for x in m["top_share"]["0.2"]) / 2
    pooled = claims[0]
    assert pooled.measured == m["pooled"]["r2"] and pooled.holds == (m["pooled"]["r2"] >= 0.9)


def test_registered_and_bad_options(tiny_models):
    assert PROBES.get("heavy-hitters") is HeavyHitterProbe
    with pytest.raises(UsageError, match="row_stride"):
        HeavyHitterProbe(row_stride=0)
    with pytest.raises(UsageError, match="top_share"):
        HeavyHitterProbe(shares=(0.1,), top_share=0.2)
    with pytest.raises(UsageError, match="needs at least 64"):
        HeavyHitterProbe().attach(tiny_models["gpt2"], torch.zeros(10, dtype=torch.long))


def test_figures(tiny_models, tmp_path):
    from attnlab.experiments.runner import RunContext

    model = tiny_models["llama"]
    probe = HeavyHitterProbe(heavy=8, recent=8)
    stream(model, torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(3)), [probe], chunk=16)
    files = probe.figures(probe.result(), RunContext(out=tmp_path))
    assert set(files) == {"heavy_rank_frequency.png", "heavy_top_share.png"}
    assert all((tmp_path / f).stat().st_size > 0 for f in files)
