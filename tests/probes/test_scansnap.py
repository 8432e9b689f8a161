"""Scan&Snap probe: corpus statistics against a hand count, planted attention that follows PMI or frequency,
the sampled pairs against full-forward attention maps, bounded memory, claims that can fail."""
import math
from collections import Counter

import pytest
import torch

from attnlab.core.errors import UsageError
from attnlab.experiments.runner import RunContext
from attnlab.models.trace import Trace
from attnlab.probes.base import PROBES
from attnlab.probes.scansnap import CoOccurrence, ScanSnapProbe
from attnlab.probes.stream import stream
from tiny_models import tiny


def test_registered():
    assert PROBES.get("scan-snap") is ScanSnapProbe


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_pmi_and_frequency_equal_a_hand_count(alpha):
    ids = [5, 3, 5, 7, 3, 5, 3, 9]
    w, T = 2, len(ids)
    pairs = Counter((ids[i], ids[j]) for i in range(T) for j in range(max(0, i - w), i))  # key before query
    P, c = sum(pairs.values()), Counter(ids)
    stats = CoOccurrence(torch.tensor(ids), w, alpha)
    assert P == stats.P == 2 * T - 3
    for v in set(ids):
        assert stats.freq(torch.tensor(v)).item() == pytest.approx(c[v] / T)
    for q in set(ids):
        for k in set(ids):
            if alpha == 0 and not pairs[q, k]:
                continue  # log 0
            p_qk, p_q, p_k = pairs[q, k] / P, c[q] / T, c[k] / T
            want = (math.log(p_qk / (p_q * p_k)) if alpha == 0  # the textbook PMI
                    else math.log((pairs[q, k] + alpha) / (P * p_q * p_k + alpha)))
            assert stats.cooc(torch.tensor(q), torch.tensor(k)).item() == pairs[q, k]
            assert stats.pmi(torch.tensor(q), torch.tensor(k)).item() == pytest.approx(want, abs=1e-12)


def _text(T=900, seed=0):
    """Tokens from 12 'topics' of 6 words each plus 6 common words: PMI and frequency both vary."""
    g = torch.Generator().manual_seed(seed)
    topic = torch.randint(0, 12, (T // 30 + 1,), generator=g).repeat_interleave(30)[:T]  # a topic per 30 tokens
    word = 6 + topic * 6 + torch.randint(0, 6, (T,), generator=g)
    common = torch.rand(T, generator=g) < 0.4
    return torch.where(common, torch.randint(0, 6, (T,), generator=g), word)


def _planted(kinds, T=900, chunk=150, beta=1.0, seed=0, **options):
    """A probe fed synthetic patterns: per layer, attention ∝ exp(β PMI), ∝ 1 / f(key), or random; the
    sink and the query's own token get extra mass the probe must leave out."""
    ids = _text(T, seed)
    probe = ScanSnapProbe(pairs=400, max_pairs=100_000, **options)
    probe.attach(tiny("llama", num_hidden_layers=len(kinds)), ids)
    q, k = ids[:, None].expand(T, T), ids[None, :].expand(T, T)
    g = torch.Generator().manual_seed(seed + 1)
    causal = torch.ones(T, T).tril()
    for start in range(0, T, chunk):
        for layer, kind in enumerate(kinds):
            w = {"pmi": lambda: torch.exp(beta * probe.stats.pmi(q, k)), "freq": lambda: 1 / probe.stats.freq(k),
                 "random": lambda: torch.rand(T, T, generator=g)}[kind]().float() * causal  # (T, T)
            w[:, 0] += w.sum(-1)  # a sink
            w += torch.eye(T) * w.sum(-1, keepdim=True)  # the query itself
            pattern = (w / w.sum(-1, keepdim=True))[None, None].expand(1, 4, T, T)  # (1, H, T, T)
            probe.see(f"blocks.{layer}.attn.pattern", pattern[:, :, start:start + chunk, :start + chunk], start)
    return probe, probe.result()


def test_planted_attention_is_found_and_the_shuffled_control_is_near_zero():
    probe, m = _planted(["pmi", "freq", "random"])
    assert m["pairs"] == 400 * 6
    # attention ∝ exp(β PMI) is monotone in PMI within a row; pooled over rows, each row's normaliser
    # (its keys' mean exp(β PMI), which the topic blocks make vary) blurs the ranks a little: 0.95 here
    assert m["rho_pmi"][0] > 0.93
    assert m["rho_freq"][1] < -0.97
    assert abs(m["rho_pmi"][2]) < 0.06 and abs(m["rho_freq"][2]) < 0.06
    assert m["top_over_bottom_pmi"][0] > 2 and m["top_over_bottom_freq"][1] < 0.5
    assert m["top_over_bottom_pmi"][2] == pytest.approx(1, abs=0.1)
    for what in ("pmi", "freq"):
        for lo, hi in m[f"null_{what}"]:  # chance with 2,400 pairs: |ρ| ~ 2.6 / sqrt(2400) = 0.05
            assert -0.08 < lo < 0 < hi < 0.08
    assert m["rho_pmi_heads"][0] == pytest.approx([m["rho_pmi"][0]] * 4)  # identical heads


@pytest.mark.parametrize("kinds,holds", [(["pmi", "freq", "random"], True), (["random"] * 3, False)])
def test_claims_follow_the_measurement(kinds, holds):
    probe, m = _planted(kinds, lower=2 / 3, share=0.5)  # layers 0 and 1 are the lower part
    a, b, *findings = probe.claims(m)
    assert (a.holds, b.holds) == (holds, holds)
    assert a.note and "measured" in a.note
    assert [f.status for f in findings] == ["finding"] * 4


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_sampled_attention_equals_the_full_forward_pattern(tiny_models, arch):
    model, T, gap = tiny_models[arch], 200, 4
    ids = torch.randint(0, 64, (T,), generator=torch.Generator().manual_seed(1))
    probe = ScanSnapProbe(window=gap, pairs=30, max_pairs=100)
    impl, before = model.config._attn_implementation, [p.clone() for p in model.parameters()]
    stream(model, ids, [probe], chunk=32)
    assert model.config._attn_implementation == impl
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with Trace(model, "blocks.*.attn.pattern") as tr:
        model(ids[None])
    i, j = probe.q_pos, probe.k_pos
    assert i.numel() == 100 and ((1 <= j) & (j < i - gap)).all()
    assert (i < T // 2).any() and (i >= T // 2).any()  # the reservoir keeps early and late pairs
    for layer, att in enumerate(probe.att):
        a = tr[f"blocks.{layer}.attn.pattern"][0]  # (H, T, T)
        eligible = torch.stack([a[:, q, 1:q - gap].sum(-1) for q in i.tolist()], 1)  # (H, N)
        want = a[:, i, j] / eligible * (i - gap - 1)  # (H, N)
        torch.testing.assert_close(att.T, want, rtol=1e-3, atol=1e-5)


def test_memory_is_bounded_by_the_caps(tiny_models):
    model = tiny_models["llama"]
    ids = torch.randint(0, 64, (240,), generator=torch.Generator().manual_seed(2))
    free = ScanSnapProbe(pairs=25, max_pairs=10_000)
    capped = ScanSnapProbe(pairs=25, max_pairs=60)
    stream(model, ids, [free, capped], chunk=40)
    assert free.q_pos.numel() == 25 * 6  # every chunk draws `pairs`
    assert capped.q_pos.numel() == 60 and all(a.shape == (60, 4) for a in capped.att)
    assert set(zip(capped.q_pos.tolist(), capped.k_pos.tolist())) <= set(zip(free.q_pos.tolist(),
                                                                             free.k_pos.tolist()))


def test_short_text_and_bad_options_are_one_line_errors(tiny_models):
    with pytest.raises(UsageError, match="at least gap"):
        ScanSnapProbe(window=8).attach(tiny_models["llama"], torch.arange(10))
    with pytest.raises(UsageError, match="window"):
        ScanSnapProbe(window=0)


def test_figure_is_written(tmp_path):
    probe, m = _planted(["pmi", "random"], T=300, chunk=100)
    files = probe.figures(m, RunContext(out=tmp_path))
    assert list(files) == ["scansnap.png"] and (tmp_path / "scansnap.png").stat().st_size > 0
