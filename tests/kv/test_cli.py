"""`attnlab stream` and the streaming experiments on a tiny model folder and a made-up text
(the real runs use SmolLM2, which CI does not have)."""
import json

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.evals.streaming import recompute_nll, stream_nll
from attnlab.kv.cache import PolicyCache
from attnlab.kv.policies import make_policy
from tiny_models import save_gpt2, save_hf, tiny_llama

TEXT = "the cat sat on the mat and the dog ran to the cat. " * 20


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text(TEXT)
    return save_hf(tmp_path / "m"), tmp_path / "text.txt"


@pytest.mark.slow
def test_stream_writes_metrics_and_evicting_cache_holds_less(setup, tmp_path, capsys):
    model, text = setup
    out = tmp_path / "run"
    rc = main(["stream", "--model", str(model), "--text", str(text), "--tokens", "120", "--policy", "sinks",
               "--budget", "16", "--n-sink", "2", "--recompute", "--out", str(out)])
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    runs = m["runs"]
    assert set(runs) == {"sinks(2)+window(budget=16)", "dense", "recompute window 16"}
    assert runs["sinks(2)+window(budget=16)"]["kv_bytes_max"] < runs["dense"]["kv_bytes_final"] / 4
    assert all(np.isfinite(r["ppl"]) for r in runs.values())
    assert (out / "stream.png").stat().st_size > 0
    assert set(json.loads((out / "nll.json").read_text())) == set(runs)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(": PPL " in ln and "tokens/s" in ln for ln in lines)
    assert lines[0].startswith("sinks(2)+window(budget=16): PPL") and "KV" in lines[0]
    # the bandwidth ledger: the same weights, fewer KV bytes for the evicting cache; no cache read by recompute
    sinks, dense = runs["sinks(2)+window(budget=16)"]["ledger"], runs["dense"]["ledger"]
    assert sinks["weight_bytes"] == dense["weight_bytes"] and sinks["kv_bytes"] < dense["kv_bytes"]
    # one token a forward for the cache; the dense reference took its 119 tokens in one forward (chunks of 256)
    assert sinks["tokens_per_forward"] == 1 and dense["tokens_per_forward"] == 119
    assert dense["bytes_per_token"] == pytest.approx((dense["weight_bytes"] + dense["kv_bytes"]) / 119)
    assert sinks["bytes_per_token"] < dense["weight_bytes"] + dense["kv_bytes"]  # what the full cache reads a step
    assert runs["recompute window 16"]["ledger"] is None
    assert "roofline" in lines[0] and "yield" in lines[0]
    # the rate over the last half: the cache's own run streams token by token; the dense reference is one forward
    assert runs["sinks(2)+window(budget=16)"]["late_tokens_per_s"] > 0 and "over the last half" in lines[0]
    assert runs["dense"]["late_tokens_per_s"] is None and runs["recompute window 16"]["late_tokens_per_s"] is None


@pytest.mark.slow
def test_stream_is_a_run_like_any_experiment(setup, tmp_path):
    """The ad-hoc command writes the experiment contract: config.json (its flags), metrics.json (no
    claims, counted) and report.md (the command and the result lines), through the same runner."""
    model, text = setup
    out = tmp_path / "run"
    argv = ["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--policy", "window",
            "--budget", "8", "--no-dense", "--out", str(out)]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    # the older --policy/--budget are read as the method they spell: config.json holds it, no per-method field
    assert config == {"experiment": "stream", "model": str(model), "text": str(text), "tokens": 40, "chunk": 1,
                      "recompute": False, "dense": False, "compile": False, "compile_wrapper": "python",
                      "methods": ["window:budget=8,positions=rolling"], "device": "cpu"}
    m = json.loads((out / "metrics.json").read_text())
    assert m["experiment"] == "stream" and m["claims"] == [] and m["claim_counts"]["holds"] == 0
    assert m["command"].startswith("attnlab stream --model") and list(m["runs"]) == ["window(budget=8)"]
    report = (out / "report.md").read_text()
    assert report.startswith("# stream") and m["command"] in report and "window(budget=8): PPL" in report
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_stream_compiled_reads_the_same_text_as_the_eager_full_cache(setup, tmp_path):
    """--compile adds the full cache through a static cache and a compiled step: the same NLL token by token
    as the eager full cache, and its ledger reads the whole static cache."""
    model, text = setup
    out = tmp_path / "run"
    assert main(["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--method", "full",
                 "--compile", "--no-dense", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    nll = json.loads((out / "nll.json").read_text())
    assert list(m["runs"]) == ["full", "full, compiled"] and m["compile_wrapper"] == "python"
    assert m["compile_s"]["full, compiled"] > 0
    np.testing.assert_allclose(nll["full, compiled"], nll["full"], rtol=1e-4, atol=1e-4)
    full, compiled = m["runs"]["full"]["ledger"], m["runs"]["full, compiled"]["ledger"]
    assert compiled["weight_bytes"] == full["weight_bytes"] and compiled["kv_bytes"] > full["kv_bytes"]


@pytest.mark.slow
def test_stream_compiled_streams_the_runs_own_evicting_cache_too(setup, tmp_path):
    """--compile with H2O at a token budget: its steady step compiled (attnlab.kv.steady) reads the text as the
    eager H2O cache does, token by token, and holds the same bytes; the full cache's compiled run beside it."""
    model, text = setup
    out = tmp_path / "run"
    assert main(["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--method",
                 "h2o:budget=12,positions=rolling", "--compile", "--no-dense", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    nll = json.loads((out / "nll.json").read_text())
    own = "h2o(budget=12, recent=budget/2)"
    assert list(m["runs"]) == [own, "full, compiled", f"{own}, compiled"] and m["compile_s"][f"{own}, compiled"] > 0
    np.testing.assert_allclose(nll[f"{own}, compiled"], nll[own], rtol=1e-4, atol=1e-4)
    assert m["runs"][f"{own}, compiled"]["kv_bytes_final"] == m["runs"][own]["kv_bytes_final"]


@pytest.mark.slow
def test_stream_compile_wrapper_reaches_the_compiled_step(setup, tmp_path, monkeypatch):
    """--compile-wrapper is the wrapper the compiled step is built with, and metrics.json says which. (The C++
    wrapper's equality with the Python one is tests/models/test_compiled.py's; its compile takes minutes, so
    the step here is built as asked and then compiled with the Python wrapper.)"""
    from attnlab.models import compiled

    asked = []

    class Recorded(compiled.CompiledDecode):
        def __init__(self, model, max_len, wrapper="python"):
            asked.append(wrapper)
            super().__init__(model, max_len, wrapper="python")

    monkeypatch.setattr(compiled, "CompiledDecode", Recorded)
    model, text = setup
    out = tmp_path / "run"
    assert main(["stream", "--model", str(model), "--text", str(text), "--tokens", "24", "--method", "full",
                 "--compile", "--compile-wrapper", "cpp", "--no-dense", "--out", str(out)]) == 0
    assert asked == ["cpp"] and json.loads((out / "metrics.json").read_text())["compile_wrapper"] == "cpp"


@pytest.mark.slow
def test_stream_into_an_out_that_cannot_be_replaced(setup, tmp_path, capsys, monkeypatch):
    from attnlab.core import io

    def refuse(build, target):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(io, "swap_into_place", refuse)  # staged_dir's last rename
    model, text = setup
    rc = main(["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--budget", "8",
               "--out", str(tmp_path / "ro")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "the results are in" in err[0]
    kept = next(tmp_path.glob("ro.finished-*"))
    assert {"config.json", "metrics.json", "report.md", "nll.json", "stream.png"} <= {p.name for p in kept.iterdir()}


@pytest.mark.parametrize("argv, message", [
    (["--policy", "sink"], "did you mean 'sinks'"),
    (["--policy", "sinks", "--budget", "4", "--n-sink", "4"], "budget >= 5"),
    (["--positions", "rolling", "--model", "GPT2"], "learned absolute positions"),
    (["--model", "nowhere/at/all/x"], "no such"),
    (["--tokens", "1"], "--tokens 1"),
    (["--chunk", "0"], "--chunk 0"),
    (["--method", "h2o:budget=0.2,recnt=3"], "did you mean 'recent'"),
    (["--method", "window:budget=8", "--method", "sinks:budget=8"], "one KV-cache policy at a time"),
    (["--method", "yarn:factor=0"], "need factor >= 1"),
    (["--compile", "--chunk", "4"], "drop --chunk 4"),
    (["--compile", "--method", "oracle:keep=0.5,mode=gather"], "mode=gather gathers a kept set"),
    (["--compile", "--method", "dynamic-ntk"], "drop --method dynamic-ntk (or --compile)"),
    (["--compile", "--compile-wrapper", "c"], "--compile-wrapper 'c': give one of python, cpp"),
    (["--compile-wrapper", "cpp"], "add --compile"),
])
def test_stream_bad_input_is_one_line_exit_2(setup, tmp_path, capsys, argv, message):
    model, text = setup
    if "GPT2" in argv:
        g = save_gpt2(tmp_path / "gpt2")
        argv = [a if a != "GPT2" else str(g) for a in argv]
        capsys.readouterr()  # saving the model may print its own progress
    base = ["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--out", str(tmp_path / "o")]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing written


def test_the_late_rate_counts_the_tokens_and_seconds_of_the_streams_last_half_alone():
    from attnlab.evals.streaming import StreamResult

    # 8 tokens: the first 4 slow (1 s each, a cache filling), the last 4 fast (0.25 s each)
    clock = [(t, float(t)) for t in range(1, 5)] + [(4 + t, 4 + 0.25 * t) for t in range(1, 5)]
    r = StreamResult(np.zeros(7), clock[-1][1], [], clock)
    assert r.tokens_per_s == pytest.approx(8 / 5)  # the mean holds the slow half
    assert r.late_tokens_per_s == pytest.approx(3 / 0.75)  # from the clock's middle entry (token 5) to its last
    assert StreamResult(np.zeros(7), 1.0, [], clock[:1]).late_tokens_per_s is None  # one forward: no rate


def test_chunked_dense_streaming_is_exact_and_recompute_with_a_long_window_is_dense():
    model = tiny_llama()
    ids = torch.randint(0, 300, (50,), generator=torch.Generator().manual_seed(0))
    one = stream_nll(model, ids, PolicyCache(model, make_policy("full")), chunk=1)
    many = stream_nll(model, ids, PolicyCache(model, make_policy("full")), chunk=16)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[None]).logits[0, :-1], -1)
    ref = -logp.gather(-1, ids[1:, None])[:, 0].numpy()
    np.testing.assert_allclose(one.nll, ref, atol=1e-5)
    np.testing.assert_allclose(many.nll, ref, atol=1e-5)
    np.testing.assert_allclose(recompute_nll(model, ids, window=64).nll, ref, atol=1e-5)
    win = recompute_nll(model, ids, window=8).nll
    assert np.abs(win - ref).max() > 1e-3  # a short window does change the prediction


@pytest.mark.slow
@pytest.mark.parametrize("name, long, n_claims", [("streaming-ppl", 0, 3), ("streaming-ppl", 96, 6), ("h2o-ppl", 0, 3)])
def test_streaming_experiments_state_their_claims(setup, tmp_path, name, long, n_claims):
    model, text = setup
    out = tmp_path / name
    sets = [f"model={model}", f"text={text}", "tokens=64", "budget=16"]
    long_sets = [f"long_tokens={long}", "recompute_samples=4"]
    sets += long_sets if name == "streaming-ppl" else ["recent=8", "sweep_recent=4"]
    argv = ["reproduce", name, "--out", str(out)] + [a for s in sets for a in ("--set", s)]
    assert main(argv) == 0
    claims = json.loads((out / "metrics.json").read_text())["claims"]
    assert len(claims) == n_claims
    assert all({"measured", "expected", "tolerance", "holds"} <= set(c) for c in claims)
    if long:  # flatness is judged against re-computation on the same sampled tokens; the old measure is a finding
        control = json.loads((out / "metrics.json").read_text())["recompute_control"]
        assert [len(control[k]["positions"]) for k in ("within", "past")] == [4, 4]
        assert all(32 - 1 <= t < 64 - 1 for t in control["within"]["positions"])
        assert all(64 - 1 <= t < long - 1 for t in control["past"]["positions"])
        assert [c["status"] == "finding" for c in claims] == [False] * 5 + [True]
    if name == "h2o-ppl":  # the budget-split sweep: the claim's split and the swept one, in order
        metrics = json.loads((out / "metrics.json").read_text())
        assert list(metrics["sinks_h2o_ppl_by_recent"]) == ["4", "8"]
        assert list(metrics["ppl"]) == ["dense", "sinks 4+12", "h2o 8 heavy+8 recent", "sinks+h2o 4+4+8", "knorm 16"]
        assert [c["status"] for c in claims] == ["finding", "holds" if claims[1]["holds"] else "fails", "finding"]
        assert claims[1]["claim"].startswith("knorm") and 0 <= claims[2]["measured"] <= 1
        assert (out / "h2o_split.png").exists()


@pytest.mark.parametrize("sets, message", [
    (["policies=sinks,sinks+h2o,full"], "policies ['full']: use some of window, sinks, h2o, sinks+h2o, knorm"),
    (["policies=sinks,knorm"], "keep both"),
    (["budget=12", "recent=8"], "use a budget >= 13"),
    (["sweep_recent=13"], "sweep_recent 13 must lie in (0, budget - n_sink) = (0, 12)"),
])
def test_h2o_ppl_policies_and_budgets_are_checked_before_any_run(setup, tmp_path, capsys, sets, message):
    model, text = setup
    sets = [f"model={model}", f"text={text}", "tokens=64", "budget=16", "recent=8"] + sets
    out = tmp_path / "o"
    assert main(["reproduce", "h2o-ppl", "--out", str(out)] + [a for s in sets for a in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("sets, message", [(["long_tokens=96", "recompute_samples=0"], "recompute_samples=0"),
                                           (["long_tokens=96", "recompute_samples=40"], "sample fewer"),
                                           (["long_tokens=64"], "must exceed the model's context")])
def test_streaming_ppl_long_stream_settings_are_checked_before_any_run(setup, tmp_path, capsys, sets, message):
    model, text = setup
    sets = [f"model={model}", f"text={text}", "tokens=64", "budget=16"] + sets
    out = tmp_path / "o"
    assert main(["reproduce", "streaming-ppl", "--out", str(out)] + [a for s in sets for a in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (out / "metrics.json").exists()


@pytest.mark.slow
def test_stream_composes_a_method_of_every_kind_as_nesting_them_by_hand_does(setup, tmp_path):
    """`attnlab stream --method int8 --method cats:... --method yarn:factor=2 --method h2o:budget=0.2` streams
    through exactly the model the four context managers give when nested by hand in the stack's order."""
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.quant.transform import QuantizedWeights
    from attnlab.rope.apply import ScaledRope
    from attnlab.rope.scalings import make_scaling
    from attnlab.sparsity.measure import rule_builder
    from attnlab.sparsity.mlp import SparseMLP

    model_dir, text = setup
    cats = f"cats:keep=0.5,calibration={text},calibration_tokens=48"
    argv = ["stream", "--model", str(model_dir), "--text", str(text), "--tokens", "40", "--no-dense",
            "--method", "h2o:budget=0.2", "--method", cats, "--method", "int8", "--method", "yarn:factor=2",
            "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # in the stack's order, each spelled with the options that differ from its defaults (keep 0.5 is cats')
    assert m["methods"] == ["int8", "yarn", cats.replace("keep=0.5,", ""), "h2o:budget=0.2"]
    assert m["positions"] == "original"
    got = json.loads((tmp_path / "run" / "nll.json").read_text())["h2o(budget=0.2, recent=budget/2)"]
    model, tok = load_model(str(model_dir))
    ids = text_ids(tok, str(text), 40)
    with QuantizedWeights(model, "int8"), ScaledRope(model, make_scaling("yarn", 2.0)):
        rule = rule_builder(model, "cats", text_ids(tok, str(text), 48))(0.5)
        with SparseMLP(model, rule):
            by_hand = stream_nll(model, ids, PolicyCache(model, make_policy("h2o", 0.2), "original")).nll
    assert got == by_hand.round(5).tolist()


@pytest.mark.slow
def test_a_method_replaces_the_older_flags_of_its_kind_and_equals_them(setup, tmp_path):
    model, text = setup
    common = ["stream", "--model", str(model), "--text", str(text), "--tokens", "40", "--no-dense"]
    assert main(common + ["--policy", "sinks", "--budget", "8", "--n-sink", "2", "--positions", "original",
                          "--out", str(tmp_path / "old")]) == 0
    assert main(common + ["--policy", "h2o", "--method", "sinks:budget=8,n_sink=2",
                          "--out", str(tmp_path / "new")]) == 0
    old, new = (json.loads((tmp_path / d / "nll.json").read_text()) for d in ("old", "new"))
    assert old == new and list(new) == ["sinks(2)+window(budget=8)"]
