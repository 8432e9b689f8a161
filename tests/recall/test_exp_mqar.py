"""``attnlab reproduce recall-under-eviction`` at a test's size, and the measurements under it: the full cache
streamed token by token answers as one parallel forward does, a window holds exactly the values inside it, the
value mass is H2O's accumulated score read off the attention maps, and bad input is one line and exit 2."""
import json
import types

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.kv.policies import make_policy
from attnlab.recall.mqar import sample
from attnlab.recall.mqar_claims import contrast, evicted_at_chance, heavy_over_base, pack, rate_interval, unpack
from attnlab.recall.mqar_stream import query_positions, stream, value_mass, value_positions
from attnlab.recall.mqar_train import build, query_logits, task_at

CFG = types.SimpleNamespace(seed=0, n_keys=12, n_filler=6, pairs=4, queries=3, max_gap=10, d_model=32, layers=2,
                            heads=2, d_ffn=64)
TINY = ["--set", "n_keys=12", "--set", "n_filler=6", "--set", "pairs=4", "--set", "queries=3", "--set", "max_gap=10",
        "--set", "d_model=16", "--set", "d_ffn=32", "--set", "steps=4", "--set", "batch=8", "--set", "track_every=2",
        "--set", "probe_batch=8", "--set", "eval_gaps=0,10", "--set", "eval_batch=6", "--set", "budget=8",
        "--set", "bin=4"]


def _batch(gap=10, rows=5, seed=0):
    model = build(CFG)
    model.eval()
    return model, *sample(task_at(CFG, gap, repeat=False), rows, torch.Generator().manual_seed(seed))


def test_the_full_cache_token_by_token_answers_as_one_forward():
    model, x, scored, distance = _batch()
    with torch.no_grad():
        logits, target = query_logits(model, x, scored)
    s = stream(model, x, scored, distance, make_policy("full"))
    assert torch.equal(s.hit.flatten(), (logits.argmax(-1) == target).view(x.shape[0], -1).flatten())
    assert (s.kept == 1).all()  # the full cache holds every value


def test_a_window_holds_exactly_the_values_inside_it():
    model, x, scored, distance = _batch(gap=6)
    budget = 9
    s = stream(model, x, scored, distance, make_policy("window", budget))
    at = query_positions(scored)  # (Q,)
    # the window's slots at query t: the last ones up to t; the value is inside iff it is among them
    stored = s.first[0, 0].sum().round().int().item()  # slots held at the first query
    inside = value_positions(scored, distance) > at - stored  # (B, Q)
    assert torch.equal(s.kept[0] == 1, inside) and torch.equal(s.kept[1] == 1, inside)
    assert ((s.kept == 0) | (s.kept == 1)).all()  # a window evicts the same tokens from every head


def test_the_value_mass_is_the_attention_it_received_before_the_queries():
    model, x, scored, _ = _batch()
    mass = value_mass(model, x, scored, CFG.pairs)  # (layers, B, P)
    with torch.no_grad():
        _, maps = model(x, attentions=True)
    first = int(query_positions(scored)[0])
    b, p = 2, 1  # pair 1's value stands at 2 + 2 * 1
    want = maps[1][b, :, 2 + 2 * p:first, 2 + 2 * p].sum(-1).mean()
    assert torch.allclose(mass[1, b, p], want)
    assert mass.shape == (CFG.layers, 5, CFG.pairs) and (mass > 0).all()


def test_a_tiny_run_streams_every_cache_and_states_its_claims(tmp_path):
    out = tmp_path / "rue"
    assert main(["reproduce", "recall-under-eviction", *TINY, "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["recall"]) == {"full", "window", "sinks", "h2o", "sinks+h2o", "knorm"}
    assert [t["step"] for t in m["train"]["track"]] == [0, 2, 4]
    claims = [c for c in m["claims"] if c["status"] != "finding"]
    assert len(claims) == 5 and all(c["expected"] is not None and c["n"] >= 1 for c in claims)
    assert (out / "recall_distance.png").exists() and (out / "recall_kept.png").exists()
    # every claim is recomputed from the per-query bits metrics.json keeps
    q = m["queries"]
    assert q["n"] == 2 * 6 * 3  # gaps x sequences x queries
    bits = {key: {n: unpack(v, q["n"]) for n, v in q[key].items()} for key in ("hit", "held", "evicted")}
    assert {n: float(b.mean()) for n, b in bits["hit"].items()} == pytest.approx(m["recall"])
    assert claims[0]["measured"] == pytest.approx(bits["hit"]["full"].mean())
    held, old = bits["held"]["sinks"], bits["evicted"]["window"]
    assert claims[1]["measured"] == pytest.approx(bits["hit"]["full"][held].mean() - bits["hit"]["sinks"][held].mean())
    assert claims[3]["measured"] == pytest.approx(bits["hit"]["h2o"][old].mean() - bits["hit"]["window"][old].mean())


def test_the_exact_interval_of_a_rate():
    n = 200
    assert rate_interval(np.zeros(n, bool)) == pytest.approx((0.0, 1 - 0.025 ** (1 / n)))  # Clopper-Pearson at 0
    assert rate_interval(np.ones(n, bool)) == pytest.approx((0.025 ** (1 / n), 1.0))
    lo, hi = rate_interval(np.arange(n) % 4 == 0)
    assert lo < 0.25 < hi


def test_a_contrast_resamples_whole_sequences():
    """Sequences, not queries, are drawn: outcomes shared by a sequence's queries widen the interval; identical
    caches give exactly 0; the sequences counted are those with a query in the subset."""
    seq = np.repeat(np.arange(20), 4)  # 20 sequences of 4 queries
    a, b = np.repeat(np.arange(20) % 2 == 0, 4), np.zeros(80, bool)  # a right on every other whole sequence
    d, (lo, hi), n = contrast(a, b, seq, np.ones(80, bool))
    assert d == 0.5 and n == 20 and lo < 0.35 and hi > 0.65  # 20 draws, not 80: wide
    assert contrast(a, a, seq, np.ones(80, bool))[:2] == (0.0, (0.0, 0.0))
    assert contrast(a, b, seq, seq < 5)[2] == 5


def _caches(heavy, base, evicted):
    return {"h2o": {"hit": heavy}, "window": {"hit": base, "evicted": evicted}}


def test_the_interval_decides_the_heavy_hitter_contrast():
    """h2o over window >= 0.1 on the queries window evicted: clearly above holds, clearly below fails, a
    difference whose interval holds 0.1 is unresolved."""
    cfg = types.SimpleNamespace(budget=8, h2o_margin=0.1, seed=0)
    seq, old = np.repeat(np.arange(100), 2), np.ones(200, bool)
    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.3
    above = heavy_over_base(cfg, "h2o", "window", _caches(np.ones(200, bool), base, old), seq)
    below = heavy_over_base(cfg, "h2o", "window", _caches(base.copy(), base, old), seq)
    near = heavy_over_base(cfg, "h2o", "window", _caches(base | (rng.random(200) < 0.15), base, old), seq)
    assert (above.status, below.status) == ("holds", "fails") and above.n == 100
    assert near.status == "unresolved" and near.interval[0] < 0.1 < near.interval[1]


def test_the_interval_decides_recall_of_evicted_pairs_against_chance():
    cfg = types.SimpleNamespace(n_sink=4, budget=16)
    evicted = np.ones(400, bool)
    none = evicted_at_chance(cfg, np.zeros(400, bool), evicted, 16)
    at_chance = evicted_at_chance(cfg, np.arange(400) % 16 == 0, evicted, 16)
    many = evicted_at_chance(cfg, np.arange(400) % 4 == 0, evicted, 16)
    assert (none.status, at_chance.status, many.status) == ("holds", "unresolved", "fails")
    assert at_chance.note and many.note and none.n == 400 and none.method.startswith("Clopper-Pearson")


def test_bits_pack_and_unpack():
    bits = np.random.default_rng(1).random(37) < 0.5
    assert np.array_equal(unpack(pack(bits), 37), bits)


@pytest.mark.slow
def test_the_quick_mode_decides_claims(tmp_path):
    """``--quick`` (the demo's): the claims are checked by their intervals, not turned into findings."""
    out = tmp_path / "quick"
    assert main(["reproduce", "recall-under-eviction", "--quick", "--out", str(out)]) == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    assert sum(c["status"] in ("holds", "fails") for c in claims) >= 1
    assert all("interval" in c for c in claims if c["status"] != "finding")


@pytest.mark.parametrize("setting, says", [
    ("budget=4", "above n_sink"),
    ("eval_gaps=0,40", "trained for gaps"),
    ("policies=window,lru", "policies"),
    ("queries=9", "queries <= pairs"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, setting, says):
    assert main(["reproduce", "recall-under-eviction", *TINY, "--set", setting, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "x").exists()
