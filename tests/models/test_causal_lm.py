"""The training lab's Hugging Face side: tokenizers, the Llama-style model, checkpoints that
transformers loads, and bad input. Tiny models from configs; no network."""
import json
import sys

import pytest
import torch

from attnlab import cli
from attnlab.core.errors import ConfigError, UsageError
from attnlab.data.hub import hub_lines, parse_spec
from attnlab.data.vocab import Vocab, basic_english
from attnlab.models.causal_lm import CausalLM, LlamaLMConfig, build_llama, load_causal_lm
from attnlab.models.tokenizer import load_tokenizer, make_tokenizer, train_bpe, word_tokenizer
from attnlab.train.trainer import TrainConfig, Trainer

TEXT = [
    'The "quick" brown fox (a fox!) jumped; over: the dog\'s <br /> back.',
    "Is it 3.5 or 4,000 ?  Ünïcode wörds and <unk> tokens @-@ too",
    "",
    "the dog slept . the fox ran , far away !",
] * 5


def test_word_tokenizer_equals_basic_english_vocab_exactly():
    vocab = Vocab.build(basic_english(line) for line in TEXT[:2])  # the last line's words are unseen
    tok = word_tokenizer(vocab)
    assert tok.vocab_size == len(vocab)
    assert torch.equal(tok.encode_lines(TEXT), vocab.numericalize(TEXT))
    assert (tok.encode_lines(TEXT) == 0).any()  # unseen words map to <unk>, id 0


def test_saved_tokenizers_reload_to_the_same_ids(tmp_path):
    for name, tok in [("word", make_tokenizer("word", TEXT, None)), ("bpe", train_bpe(TEXT, 300, tmp_path / "c"))]:
        tok.save(tmp_path / name)
        again = load_tokenizer(tmp_path / name)
        assert torch.equal(again.encode_lines(TEXT), tok.encode_lines(TEXT)), name
        assert again.keeps_newlines == tok.keeps_newlines


def test_bpe_is_lossless_sized_and_cached(tmp_path):
    tok = train_bpe(TEXT, 300, tmp_path)
    assert tok.vocab_size == 300
    ids = tok.encode_lines(TEXT)
    assert tok.decode(ids.tolist()) == "".join(line + "\n" for line in TEXT)  # bytes: nothing is lost
    (entry,) = [p for p in tmp_path.iterdir()]
    assert (entry / "tokenizer.json").is_file() and ".tmp" not in entry.name
    (entry / "tokenizer.json").write_text((entry / "tokenizer.json").read_text())  # touch: still a hit
    again = train_bpe(TEXT, 300, tmp_path)
    assert torch.equal(again.encode_lines(TEXT), ids) and len(list(tmp_path.iterdir())) == 1
    train_bpe(TEXT[:4], 300, tmp_path)  # other text, other entry
    assert len(list(tmp_path.iterdir())) == 2


def _llama(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=60, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ffn=48, max_len=32)
    return build_llama(LlamaLMConfig(**{**cfg, **kw}))


def test_probe_maps_match_the_fused_forward():
    model = _llama().eval()
    x = torch.randint(0, 60, (3, 11))
    fast, none = model(x, attentions=False)
    logits, maps = model(x, attentions=True)
    assert none == [] and model.hf.config._attn_implementation == "sdpa"  # switched back
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=1e-5)
    assert len(maps) == 2 and maps[0].shape == (3, 4, 11, 11)
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(3, 4, 11))
        assert a.triu(1).abs().max() == 0  # causal


def test_probe_maps_are_softmax_of_rotated_queries_and_keys():
    """Layer 0's map recomputed by hand: RMSNorm, q/k projections, RoPE, shared KV heads."""
    model = _llama().eval()
    x = torch.randint(0, 60, (2, 9))
    _, maps = model(x, attentions=True)
    hf = model.hf.model
    layer, dh = hf.layers[0], 8
    h = layer.input_layernorm(hf.embed_tokens(x))  # (B, T, d)
    q = layer.self_attn.q_proj(h).view(2, 9, 4, dh).transpose(1, 2)  # (B, 4, T, dh)
    k = layer.self_attn.k_proj(h).view(2, 9, 2, dh).transpose(1, 2)  # (B, 2, T, dh)
    inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2).float() / dh))
    ang = torch.arange(9).float()[:, None] * inv  # (T, dh/2)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(t):  # rotate_half convention: pairs (i, i + dh/2)
        t1, t2 = t[..., : dh // 2], t[..., dh // 2 :]
        return t * cos + torch.cat([-t2, t1], -1) * sin

    k = rope(k).repeat_interleave(2, dim=1)  # query heads 0,1 share KV head 0
    s = rope(q) @ k.transpose(-1, -2) / dh**0.5
    s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(maps[0], s.softmax(-1), atol=1e-6, rtol=1e-5)


def _ids(n=2000, v=60):
    return (torch.arange(n) * 7) % v


@pytest.mark.slow
def test_llama_run_killed_and_resumed_writes_identical_metrics(tmp_path):
    cfg = TrainConfig(optimizer="adam", lr=1e-3, batch_size=4, bptt=16, steps=12, track_every=3, eval_every=6,
                      eval_batches=2, checkpoint_every=6, snapshot_steps=(0, 6), batching="random")
    full = Trainer(_llama(dropout=0.1), _ids(), _ids(400), cfg, tmp_path / "full").fit(show_progress=False)

    def kill(step):
        if step == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(_llama(dropout=0.1), _ids(), _ids(400), cfg, tmp_path / "cut").fit(show_progress=False, on_step=kill)
    resumed = Trainer(_llama(dropout=0.1), _ids(), _ids(400), cfg, tmp_path / "cut").fit(resume=True,
                                                                                       show_progress=False)
    assert resumed == full
    assert len(full[0]["entropy"]) == 2 and len(full[0]["entropy"][0]) == 4  # layers x heads
    assert full[-1]["valid_loss"] < full[0]["valid_loss"]


@pytest.fixture
def corpus(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 60
    (tmp_path / "c.txt").write_text(text)
    return str(tmp_path / "c.txt")


def _train_llama(corpus, out, *extra):
    return cli.main(["train", "--model", "llama", "--train", corpus, "--valid", corpus, "--out", str(out),
                     "--vocab-size", "300", "--d-model", "32", "--d-ffn", "48", "--layers", "2", "--heads", "4",
                     "--optimizer", "adam", "--lr", "3e-3", "--batching", "random", "--batch-size", "4",
                     "--bptt", "24", "--steps", "30", "--track-every", "10", "--eval-every", "30",
                     "--checkpoint-every", "30", "--snapshot-steps", "0,30", *extra])


@pytest.mark.slow
def test_attnlab_train_llama_checkpoint_loads_with_transformers_and_generates(corpus, tmp_path, monkeypatch, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert _train_llama(corpus, out) == 0
    assert "from_pretrained" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (out / "model").iterdir()}
    assert (out / "training.png").is_file()
    hf = AutoModelForCausalLM.from_pretrained(str(out / "model")).eval()
    tok = AutoTokenizer.from_pretrained(str(out / "model"))
    assert hf.config.model_type == "llama" and hf.config.max_position_embeddings == 24
    # the saved weights are the trained ones: same logits as the trainer's own checkpoint
    trained = _llama(vocab_size=300, d_ffn=48, max_len=24).eval()
    state = torch.load(out / "checkpoint.pt", weights_only=False)["model"]
    trained.load_state_dict(state)
    x = tok("Before we proceed", return_tensors="pt").input_ids
    torch.testing.assert_close(hf(input_ids=x).logits, trained(x, attentions=False)[0])
    gen = hf.generate(x, max_new_tokens=6, do_sample=False)
    assert gen.shape == (1, x.shape[1] + 6)
    assert tok.decode(gen[0]).startswith("Before we proceed")
    capsys.readouterr()
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "Before we proceed",
                     "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == tok.decode(gen[0]) + "\n"  # the command is greedy generate
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "Before we proceed",
                     "--max-new-tokens", "6", "--compile"]) == 0
    said = capsys.readouterr()
    assert said.out == tok.decode(gen[0]) + "\n"  # the compiled step writes the same greedy tokens
    assert "compiled the decode step in" in said.err and "tokens/s" in said.err
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "x", "--temperature", "0.5",
                     "--compile"]) == 2
    capsys.readouterr()
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "x", "--compile", "c"]) == 2
    assert "give one of python, cpp" in capsys.readouterr().err
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "All:", "--temperature", "0.9",
                     "--top-k", "5", "--max-new-tokens", "4", "--seed", "3"]) == 0
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "x", "--max-new-tokens", "0"]) == 2
    # fine-tuning the saved folder: its own tokenizer by default, weights loaded as saved
    assert cli.main(["train", "--model", str(out / "model"), "--train", corpus, "--out", str(tmp_path / "ft"),
                     "--optimizer", "adam", "--lr", "1e-3", "--batching", "random", "--batch-size", "2",
                     "--bptt", "24", "--steps", "4", "--track-every", "2", "--checkpoint-every", "4"]) == 0
    lines = [json.loads(s) for s in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 4 and (tmp_path / "ft" / "model" / "model.safetensors").is_file()


def _one_line(capsys, fragment):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnlab: error:") and fragment in err[0], err


@pytest.mark.slow
def test_bad_model_and_tokenizer_input(corpus, tmp_path, capsys, monkeypatch):
    from transformers import ViTConfig

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16).save_pretrained(
        str(tmp_path / "vit"))
    base = ["train", "--train", corpus, "--steps", "2"]
    for extra, fragment in [
        (["--model", str(tmp_path / "nowhere")], "use tutorial, llama or a Hugging Face model folder"),
        (["--model", "gpt"], "use tutorial, llama or a Hugging Face model folder"),
        (["--model", str(tmp_path / "vit")], "not a causal language model"),
        (["--model", "llama", "--tokenizer", "sentencepiece"], "use word, bpe or the path"),
        (["--model", "llama", "--vocab-size", "100"], "at least 257"),
        (["--model", "llama", "--heads", "3", "--d-model", "32"], "n_heads=3"),
        (["--kv-heads", "1"], "applies to --model llama only"),
    ]:
        assert cli.main(base + ["--out", str(tmp_path / "r")] + extra) == 2, extra
        _one_line(capsys, fragment)
        assert not (tmp_path / "r").exists()
    # a loaded model keeps its own shape
    assert _train_llama(corpus, tmp_path / "ok", "--steps", "2", "--checkpoint-every", "2") == 0
    assert cli.main(base + ["--out", str(tmp_path / "r"), "--model", str(tmp_path / "ok" / "model"),
                            "--layers", "3"]) == 2
    _one_line(capsys, "--layers shape a new model")
    import shutil

    shutil.copytree(tmp_path / "ok" / "model", tmp_path / "broken")
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"not a tensor file")
    assert cli.main(base + ["--out", str(tmp_path / "r"), "--model", str(tmp_path / "broken")]) == 2
    _one_line(capsys, "cannot load its weights")
    assert not (tmp_path / "r").exists()


def test_load_causal_lm_round_trip(tmp_path):
    _llama(n_layers=1).save_pretrained(tmp_path / "m")
    model = _llama()
    model.save_pretrained(tmp_path / "m")  # replaces the 1-layer folder whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    again = load_causal_lm(tmp_path / "m")
    assert isinstance(again, CausalLM) and again.cfg == model.cfg
    x = torch.randint(0, 60, (1, 7))
    torch.testing.assert_close(again.eval()(x)[0], model.eval()(x)[0])


def test_act_defaults_to_silu_and_unknown_names_are_refused():
    assert LlamaLMConfig(60).to_hf().to_dict() == LlamaLMConfig(60, act="silu").to_hf().to_dict()
    assert LlamaLMConfig(60).to_hf().hidden_act == "silu"  # SwiGLU, as before --act existed
    assert LlamaLMConfig(60, act="relu").to_hf().hidden_act == "relu"
    with pytest.raises(ConfigError, match="act='swiglu'"):
        LlamaLMConfig(60, act="swiglu")


def _mlp_io(model, x):
    """[(gate(h), act(gate(h)))] per layer, each (B, T, d_ffn), during one forward of x (B, T)."""
    seen = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, key=(i, part): seen.__setitem__(key, out))
             for i, layer in enumerate(model.hf.model.layers)
             for part, m in enumerate((layer.mlp.gate_proj, layer.mlp.act_fn))]
    try:
        with torch.no_grad():
            model(x, attentions=False)
    finally:
        for h in hooks:
            h.remove()
    return [(seen[i, 0], seen[i, 1]) for i in range(len(model.hf.model.layers))]


def test_relu_gate_is_exactly_zero_where_the_gate_is_negative():
    """act(gate(h)) of a ReLU Llama is 0.0 exactly wherever gate(h) <= 0. At init gate's weights are
    N(0, 0.02), symmetric about 0, so gate(h) is negative for about half the entries (> 0.3 holds with
    a wide margin); SiLU, the same weights otherwise, leaves no exact zero."""
    x = torch.randint(0, 60, (4, 16))
    relu, silu = _llama(act="relu").eval(), _llama().eval()
    for gate, act in _mlp_io(relu, x):
        assert torch.equal(act == 0, gate <= 0)
        assert (act == 0).float().mean() > 0.3
    for gate, act in _mlp_io(silu, x):
        assert (act != 0).all()


def test_a_relu_llama_reloads_as_relu_with_identical_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    model = _llama(act="relu").eval()
    model.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["hidden_act"] == "relu"
    x = torch.randint(0, 60, (2, 9))
    for again in (load_causal_lm(tmp_path / "m").hf, AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"))):
        assert again.config.hidden_act == "relu"
        assert torch.equal(again.eval()(input_ids=x).logits, model(x, attentions=False)[0])


@pytest.mark.slow
def test_attnlab_train_act_relu_saves_a_relu_checkpoint(corpus, tmp_path, monkeypatch, capsys):
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert _train_llama(corpus, out, "--act", "relu", "--steps", "4", "--checkpoint-every", "4",
                        "--track-every", "2", "--eval-every", "4", "--snapshot-steps", "0") == 0
    assert json.loads((out / "config.json").read_text())["act"] == "relu"
    hf = AutoModelForCausalLM.from_pretrained(str(out / "model")).eval()
    assert hf.config.hidden_act == "relu"
    trained = _llama(vocab_size=300, d_ffn=48, max_len=24, act="relu").eval()
    trained.load_state_dict(torch.load(out / "checkpoint.pt", weights_only=False)["model"])
    x = torch.randint(0, 300, (2, 12))
    assert torch.equal(hf(input_ids=x).logits, trained(x, attentions=False)[0])
    assert all((act == 0).float().mean() > 0.3 for _, act in _mlp_io(trained, x))
    capsys.readouterr()
    assert cli.main(["generate", "--model", str(out / "model"), "--prompt", "All:", "--max-new-tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("All:")


def test_hub_specs_and_the_offline_message(monkeypatch):
    assert parse_spec("hf:Salesforce/wikitext/wikitext-2-v1:test") == ("Salesforce/wikitext", "wikitext-2-v1", "test")
    assert parse_spec("hf:tiny_shakespeare") == ("tiny_shakespeare", None, "train")
    with pytest.raises(UsageError, match="write hf:NAME"):
        parse_spec("hf:a//b")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(UsageError, match="pip install datasets"):
        hub_lines("hf:Salesforce/wikitext/wikitext-2-v1")
