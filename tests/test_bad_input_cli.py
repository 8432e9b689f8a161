"""The bad inputs of the audit (issue 53), each through the `attnlab` entry point: one line, exit 2, nothing
written. NaN compared false with every bound and so passed each range check; a --holdout left a side of the split
empty; an offline hub id waited on the network before its error."""
import re
import socket

import pytest
import transformers

from attnlab.cli import main
from attnlab.models import pretrained
from tiny_models import byte_tokenizer, tiny_llama


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnlab: error: "), err
    return err[0]


@pytest.mark.parametrize("argv, says", [
    (["stream", "--budget", "nan"], "--budget nan: give budget a finite number"),
    (["stream", "--budget", "inf", "--policy", "window"], "--budget inf: give budget a finite number"),
    (["eval", "--policy", "sinks", "--budget", "nan"], "--budget nan: give budget a finite number"),
    (["eval", "--sparsity", "oracle", "--keep", "nan"], "--keep nan: give keep a finite number"),
    (["sweep", "eval", "--grid", "budget=nan,0.5"], "cell budget=nan: --set budget=nan: give budget a finite number"),
    (["sweep", "scansnap-theorem4-sweep", "--grid", "ratios=10;inf"], "cell ratios=inf: --set ratios=inf: give ratios"),
    (["reproduce", "scansnap-theorem4-sweep", "--set", "factor=nan"], "--set factor=nan: give factor a finite number"),
    (["reproduce", "scansnap-theorem4-sweep", "--set", "ratios=10,inf"], "--set ratios=10,inf: give ratios finite"),
    (["reproduce", "scansnap-fig4", "--set", "eta_z=1e999"], "--set eta_z=1e999: give eta_z a finite number"),
    (["probe", "--probes", "sinks", "--option", "eps=nan"], "--option eps=nan: give eps a finite number"),
    (["stream", "--tokens", "99999999999999999999"], "--tokens 99999999999999999999: tokens is out of range"),
])
def test_nan_infinity_and_huge_numbers_are_one_line_exit_2(tmp_path, capsys, argv, says):
    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 2
    assert says in one_line(capsys)
    assert not out.exists()


def test_a_kv_policy_built_in_code_refuses_nan_too():
    """make_policy is the method's own check, for callers that never pass the command line (NaN used to reach
    int() in capacity())."""
    from attnlab.core.errors import UsageError
    from attnlab.kv.policies import make_policy

    for budget, says in [(float("nan"), "budget nan: give budget a finite number"), (float("inf"), "finite"),
                         (0.0, "give a token count >= 1 or a fraction in (0, 1)")]:
        with pytest.raises(UsageError, match=re.escape(says)):
            make_policy("sinks", budget)
    with pytest.raises(UsageError, match="need n_sink >= 0"):
        make_policy("sinks", 16, n_sink=-1)
    assert make_policy("sinks", 0.5).capacity(100) == 50


# ------------------------------------------------------------------ train --holdout


def _train(text, out, *extra):
    return main(["train", "--train", str(text), "--out", str(out), "--d-model", "16", "--d-ffn", "16", "--batching",
                 "random", "--batch-size", "1", "--steps", "1", "--track-every", "1", "--eval-every", "1", *extra])


@pytest.mark.parametrize("lines, extra, says", [
    (["the cat sat on the mat and the dog ran"], ["--holdout", "0.5"],
     "--holdout 0.5 leaves the training part 0 tokens, fewer than one training window (--bptt 35 + 1 = 36): give a "
     "longer text or a smaller --holdout"),
    (["the cat sat on the mat and the dog ran"], ["--holdout", "0.01"], "leaves the held-out part 0 tokens"),
    (["a b c d e f g h i"] * 9 + ["a b c d e f g h"], ["--holdout", "0.1", "--bptt", "8"],
     "leaves the held-out part 8 tokens, fewer than one training window (--bptt 8 + 1 = 9): give a longer text or a "
     "larger --holdout"),
    (["a b c"] * 9 + ["a b c d e f g h i"], ["--holdout", "0.1", "--bptt", "30"], "the training part 27 tokens"),
    (["the cat sat"], ["--lr", "nan"], "--lr nan: give lr a finite number"),
    (["the cat sat"], ["--clip=-inf"], "--clip -inf: give clip a finite number"),
])
def test_a_split_shorter_than_a_training_window_is_one_line(tmp_path, capsys, lines, extra, says):
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    assert _train(tmp_path / "t.txt", tmp_path / "run", *extra) == 2
    assert says in one_line(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_split_of_exactly_one_window_trains(tmp_path, capsys):
    """The boundary itself: nine held-out tokens are one window of --bptt 8, enough to validate on."""
    (tmp_path / "t.txt").write_text("\n".join(["a b c d e f g h i"] * 10) + "\n")
    assert _train(tmp_path / "t.txt", tmp_path / "run", "--holdout", "0.1", "--bptt", "8") == 0
    assert "valid loss" in capsys.readouterr().out


# ------------------------------------------------------------------ offline hub id


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Every way out of the process recorded and refused; Hugging Face's cache an empty folder."""
    import huggingface_hub.constants

    tried = []

    def refuse(*args, **kwargs):
        tried.append(args[:2])
        raise OSError("the test forbids the network")

    for owner, name in [(socket, "getaddrinfo"), (socket, "create_connection"), (socket.socket, "connect")]:
        monkeypatch.setattr(owner, name, refuse)
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):  # would ask the hub first
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")
    return tried


def test_offline_a_hub_id_is_refused_at_once_with_no_network_call(tmp_path, capsys, no_network):
    (tmp_path / "t.txt").write_text("the cat sat on the mat\n" * 20)
    out = tmp_path / "run"
    assert main(["stream", "--model", "someone/some-model", "--text", str(tmp_path / "t.txt"), "--tokens", "16",
                 "--out", str(out)]) == 2
    line = one_line(capsys)
    assert "model someone/some-model: a hub id not in the Hugging Face cache, and downloads are off" in line
    assert no_network == [] and not out.exists()


def test_offline_a_hub_id_in_the_hugging_face_cache_loads_from_it_alone(monkeypatch, no_network):
    import huggingface_hub

    asked = []

    def cached_only(cls_name, made):
        def load(target, **kwargs):
            asked.append((cls_name, target, kwargs.get("local_files_only")))
            return made

        return load

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", cached_only("model", tiny_llama()))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", cached_only("tokenizer", byte_tokenizer()))
    model, _ = pretrained.load_model_and_tokenizer("someone/some-model")
    assert asked == [("model", "someone/some-model", True), ("tokenizer", "someone/some-model", True)]
    assert not model.training and no_network == []


def test_a_probe_built_in_code_refuses_nan_in_a_bounded_and_an_unbounded_option():
    from attnlab.core.errors import UsageError
    from attnlab.probes.base import PROBES
    from attnlab.probes.run import load_probes

    load_probes()
    with pytest.raises(UsageError, match=re.escape("sinks: eps=nan: give eps a finite number")):
        PROBES.get("sinks")(eps=float("nan"))  # "(0, 1)" alone never saw it: NaN fails both comparisons
    with pytest.raises(UsageError, match=re.escape("heavy-hitters: shares=0.1,inf: give shares finite numbers")):
        PROBES.get("heavy-hitters")(shares=(0.1, float("inf")))
