"""benchmarks/gpu_smoke.py without a GPU: its random model is a folder attnlab loads and runs, its verdicts
tell a device crash from other failures, and an unknown experiment is refused."""
import pytest
import torch


@pytest.fixture
def smoke(load_benchmark, monkeypatch):
    gpu_smoke, shapes = load_benchmark("gpu_smoke"), load_benchmark("shapes")

    # SmolLM2's shape at a test's size: the same keys, so the folder is built as the real one is
    for key, value in {"vocab_size": 300, "hidden_size": 36, "intermediate_size": 64,
                       "max_position_embeddings": 128}.items():
        monkeypatch.setitem(shapes.SMOLLM2, key, value)
    return gpu_smoke


def test_the_random_model_is_a_folder_attnlab_loads_and_runs(smoke, tmp_path):
    from attnlab.evals.inputs import load_model

    model, tok = load_model(str(smoke.random_model(tmp_path / "m", layers=2)), "cpu")
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (2, 9, 3)
    ids = tok("a passkey is 4321.", return_tensors="pt").input_ids
    assert tok.decode(ids[0]) == "a passkey is 4321." and int(ids.max()) < cfg.vocab_size
    assert len(tok(" the").input_ids) == 1  # a trained BPE: common words are single tokens (the probes need it)
    assert torch.isfinite(model(ids).logits).all()


@pytest.mark.parametrize("rc, output, expected", [
    (0, "whatever", "ok"),
    (None, "half a run", "timeout"),
    (1, "Traceback ...\nRuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!\n", "device"),
    (2, "loading\nattnlab: --budget 0: keep at least 1 token\n\n", "error: attnlab: --budget 0: keep at least 1 token"),
])
def test_a_verdict_tells_a_device_crash_from_other_failures(smoke, rc, output, expected):
    assert smoke.verdict(rc, output) == expected


def test_an_unknown_experiment_is_refused(smoke, capsys):
    with pytest.raises(SystemExit) as e:
        smoke.main(["--device", "cpu", "--only", "probe,no-such-thing"])
    assert e.value.code == 2 and "no-such-thing" in capsys.readouterr().err
