"""benchmarks/bench_stream_loop.py on a tiny model of SmolLM2's shape: every loop decodes the same tokens to
the same NLL, and the report names each loop with its ratio to the plain one."""
import pytest
import torch


@pytest.fixture
def bench(load_benchmark, monkeypatch):
    bench_stream_loop, shapes = load_benchmark("bench_stream_loop"), load_benchmark("shapes")

    for key, value in {"vocab_size": 300, "hidden_size": 36, "intermediate_size": 64, "num_hidden_layers": 2,
                       "max_position_embeddings": 128}.items():
        monkeypatch.setitem(shapes.SMOLLM2, key, value)
    return bench_stream_loop, shapes


def test_every_loop_scores_the_same_tokens_alike(bench):
    mod, shapes = bench
    model = shapes.random_llama("smollm2")
    ids = torch.randint(0, 300, (33,), generator=torch.Generator().manual_seed(0))
    nll = {name: fn(ids) for name, fn in mod.variants(model, budget=64).items()}  # 64 > 32: nothing evicted
    plain = nll.pop("plain")
    for name, result in nll.items():
        torch.testing.assert_close(torch.as_tensor(result.nll, dtype=torch.float32), plain, atol=1e-4, rtol=1e-4,
                                   msg=name)


def test_the_report_names_each_loop_and_its_ratio(bench, capsys, tmp_path):
    mod, _ = bench
    assert mod.main(["--device", "cpu", "--tokens", "8", "--repeats", "1", "--dtype", "float32",
                     "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    for name in ("plain", "stream, DynamicCache", "stream, full", "stream, sinks", "stream, h2o", "stream, h2o rolling",
                 "stream, h2o rolling, rotations owed"):
        assert f"| {name} |" in out
    assert "rotations owed over rotated at once" in out
    assert (tmp_path / "r" / "result.json").exists() and "goal >= 0.95x each" in out
