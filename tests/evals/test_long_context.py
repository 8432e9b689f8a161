"""Passkey prompts and retrieval, sliding-window long-context perplexity (tiny models, no network)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlab.core.errors import UsageError
from attnlab.evals.longppl import long_ppl, window_ends
from attnlab.evals.passkey import PasskeyPrompts, answer_of, check_fits, passkey_cases, retrieve
from attnlab.rope.apply import ScaledRope
from attnlab.rope.scalings import SCALINGS, make_scaling
from tiny_models import byte_tokenizer, save_gpt2, tiny_llama


@pytest.fixture(scope="module")
def prompts():
    return PasskeyPrompts(byte_tokenizer())


def test_cases_are_a_fixed_grid_with_fixed_keys():
    a, b = passkey_cases([400, 800], [0.0, 0.5, 1.0], 2, seed=0), passkey_cases([400, 800], [0.0, 0.5, 1.0], 2, seed=0)
    assert a == b and len(a) == 12
    assert all(1 <= c.key <= 50000 for c in a)
    assert len({c.key for c in a}) > 1


@pytest.mark.parametrize("length", [400, 777, 1500])
@pytest.mark.parametrize("depth", [0.0, 0.3, 1.0])
def test_prompt_has_the_exact_length_and_the_key_at_its_depth(prompts, length, depth):
    case = passkey_cases([length], [depth], 1, seed=4)[0]
    ids = prompts.build(case)
    assert len(ids) == length
    key = prompts.key_sentence(case.key)
    starts = [i for i in range(len(ids) - len(key) + 1) if ids[i:i + len(key)] == key]
    assert len(starts) == 1
    assert ids[:len(prompts.head)] == prompts.head and ids[-len(prompts.question):] == prompts.question
    body = len(ids) - len(prompts.head) - len(key) - len(prompts.question)
    rel = (starts[0] - len(prompts.head)) / body  # where the key sits inside the filler
    assert abs(rel - depth) <= len(prompts.filler) / body + 1e-9
    text = byte_tokenizer().decode(ids)
    assert f"The pass key is {case.key}. Remember it. {case.key} is the pass key." in text
    assert text.endswith("What is the pass key? The pass key is")


def test_too_short_prompts_and_too_long_prefills_are_refused(prompts):
    with pytest.raises(UsageError, match="at least"):
        prompts.build(passkey_cases([50], [0.5], 1)[0])
    with pytest.raises(UsageError, match="shorter --lengths"):
        check_fits(tiny_llama().config, 10 ** 12)


@pytest.mark.parametrize("text, key", [(" 4821. Remember", 4821), ("is 17 and 3", 17), (" none", None)])
def test_answer_is_the_first_integer(text, key):
    assert answer_of(text) == key


def test_retrieve_is_greedy_generate():
    model, tok = tiny_llama(), byte_tokenizer()
    ids = torch.randint(0, 255, (60,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, 60:]
    assert retrieve(model, tok, ids, max_new=8) == tok.decode(ref.tolist(), skip_special_tokens=True)


# -- long-context perplexity ----------------------------------------------------------------------
def _classic(model, ids, n, stride, ends):
    """The protocol spelled out: per window of n tokens ending at e, a full forward and the NLL of
    its last stride tokens."""
    out = []
    for e in ends:
        with torch.no_grad():
            logits = model(ids[None, e - n:e]).logits[0, :-1]
        nll = -F.log_softmax(logits, -1).gather(-1, ids[e - n + 1:e, None])[:, 0]
        out.append(float(nll[-stride:].mean()))
    return out


def test_long_ppl_is_the_sliding_window_protocol_on_the_same_tokens():
    model = tiny_llama()
    ids = torch.randint(0, 300, (200,), generator=torch.Generator().manual_seed(2))
    lengths, stride = [32, 48, 96], 16
    res = long_ppl(model, ids, lengths, stride=stride)
    ends = window_ends(200, 96, stride, None)
    assert ends == list(range(96, 201, 16))  # every length scores tokens e-16 .. e-1 of the same ends
    for n in lengths:
        np.testing.assert_allclose(res.nll[n], _classic(model, ids, n, stride, ends), atol=1e-5)
        assert res.ppl(n) == pytest.approx(math.exp(np.mean(res.nll[n])))


def test_a_window_as_long_as_the_stride_is_refused():
    """Its first scored token would have no token before it (its logits would be read off the window's end)."""
    with pytest.raises(UsageError, match="not longer than the stride"):
        long_ppl(tiny_llama(), torch.arange(100) % 7, [16, 32], stride=16)


def test_dynamic_ntk_is_scored_at_each_length_own_frequencies():
    """Dynamic NTK follows the forward's length: a 48-token window (inside the trained 64) is
    scored with the original RoPE, a 96-token one with rescaled frequencies."""
    model = tiny_llama()
    ids = torch.randint(0, 300, (120,), generator=torch.Generator().manual_seed(2))
    plain = long_ppl(model, ids, [48, 96], stride=16, windows=2)
    with ScaledRope(model, make_scaling("dynamic-ntk", 2.0)):
        dyn = long_ppl(model, ids, [48, 96], stride=16, windows=2)
    np.testing.assert_allclose(dyn.nll[48], plain.nll[48], atol=1e-6)
    assert not np.allclose(dyn.nll[96], plain.nll[96], atol=1e-7, rtol=0)


def test_window_cap_and_too_short_text():
    assert window_ends(1000, 100, 10, 3) == [100, 550, 1000]
    with pytest.raises(UsageError, match="longer --text"):
        window_ends(50, 100, 10, None)


# -- the commands ---------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path, monkeypatch):
    from tiny_models import save_hf

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "text.txt").write_text("the cat sat on the mat and the dog ran to the cat. " * 40)
    return save_hf(tmp_path / "m"), tmp_path / "text.txt"


@pytest.mark.slow
def test_passkey_command_writes_every_cell(folder, tmp_path, capsys):
    import json

    from attnlab.cli import main

    model, _ = folder
    out = tmp_path / "pk"
    assert main(["passkey", "--model", str(model), "--scalings", "none,ntk,yarn", "--factor", "4",
                 "--lengths", "400,500", "--depths", "0,1", "--samples", "2", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["passkey"]) == {"none", "ntk(s=4)", "yarn(s=4)"}
    cells = m["passkey"]["ntk(s=4)"]
    assert len(cells) == 2 * 2 * 2 and all(c["correct"] == (c["answer"] == c["key"]) for c in cells)
    assert [c["key"] for c in cells] == [c["key"] for c in m["passkey"]["none"]]  # same prompts for every scaling
    assert (out / "passkey.png").stat().st_size > 0
    head, *lines = capsys.readouterr().out.strip().splitlines()
    assert head.startswith(f"{model} (trained context 64), factor 4; passkey accuracy by scaling: none ")
    assert [ln.split(":")[0] for ln in lines] == ["none", "ntk(s=4)", "yarn(s=4)"]
    assert all(ln.split(": ", 1)[1].startswith("passkey accuracy 400: ") and ", 500: " in ln for ln in lines)
    _is_a_run(out, "passkey", lines, claims=3)  # 500 tokens is past the tiny model's 64: none, ntk and yarn claim
    assert json.loads((out / "config.json").read_text())["depths"] == [0.0, 1.0]
    assert m["trained_context"] == 64 and m["accuracy"] == np.mean([c["correct"] for r in m["passkey"].values()
                                                                     for c in r])


def _is_a_run(out, name, lines, claims=0):
    """A command writes the experiment contract through the runner: config.json, metrics.json (its claims,
    counted; the command) and report.md with the printed result lines."""
    import json

    config = json.loads((out / "config.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert config["experiment"] == metrics["experiment"] == name and config["device"] == "cpu"
    statuses = {"holds", "fails", "unresolved", "erratum", "finding"}
    assert len(metrics["claims"]) == claims and set(metrics["claim_counts"]) == statuses
    assert metrics["command"].startswith(f"attnlab {name} ")
    report = (out / "report.md").read_text()
    assert report.startswith(f"# {name}") and all(ln in report for ln in lines)


@pytest.mark.slow
def test_longppl_command_writes_a_curve_per_scaling(folder, tmp_path, capsys):
    import json

    from attnlab.cli import main

    model, text = folder
    out = tmp_path / "lp"
    assert main(["longppl", "--model", str(model), "--text", str(text), "--scalings", "none,pi,dynamic-ntk",
                 "--factor", "2", "--lengths", "32,64,128", "--stride", "16", "--windows", "2", "--out", str(out)]) == 0
    ppl = json.loads((out / "metrics.json").read_text())["ppl"]
    assert set(ppl) == {"none", "pi(s=2)", "dynamic-ntk(s=2)"}
    assert all(set(v) == {"32", "64", "128"} and all(math.isfinite(x) for x in v.values()) for v in ppl.values())
    assert (out / "longppl.png").stat().st_size > 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"{k}: PPL " + ", ".join(f"{n}: {ppl[k][str(n)]:.2f}" for n in (32, 64, 128)) for k in ppl]
    _is_a_run(out, "longppl", lines)


@pytest.mark.slow
def test_longppl_enters_its_methods_around_every_curve_and_a_rope_method_replaces_scalings(folder, tmp_path):
    """`longppl --method oracle:keep=0.5` is each curve under SparseMLP by hand; `--method yarn:...,beta_fast=8`
    is the one curve, YaRN with that option."""
    import json

    from attnlab.cli import main
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.experiments.runner import RunContext
    from attnlab.rope.compare import longppl_by_scaling
    from attnlab.sparsity.mlp import SparseMLP
    from attnlab.sparsity.rules import Oracle

    model_dir, text = folder
    common = ["longppl", "--model", str(model_dir), "--text", str(text), "--lengths", "32,64", "--stride", "16",
              "--windows", "2"]
    assert main(common + ["--scalings", "none,ntk", "--method", "oracle:keep=0.5", "--out", str(tmp_path / "a")]) == 0
    assert main(common + ["--method", "yarn:factor=2,beta_fast=8", "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("a", "b"))
    model, tok = load_model(str(model_dir))
    ids, ctx = text_ids(tok, str(text), 128), RunContext(out=None, show_progress=False)
    with SparseMLP(model, Oracle(0.5)):
        hand = longppl_by_scaling(model, ids, [make_scaling("none"), make_scaling("ntk", 2.0)], [32, 64], 16, 2, ctx)
    assert a["ppl"] == {k: {str(n): c.ppl(n) for n in c.lengths} for k, c in hand.items()}
    assert a["methods"] == ["oracle"] and list(b["ppl"]) == ["yarn(s=2)"]
    yarn8 = longppl_by_scaling(model, ids, [SCALINGS.get("yarn")(2.0, 8.0)], [32, 64], 16, 2, ctx)["yarn(s=2)"]
    assert b["ppl"]["yarn(s=2)"] == {str(n): yarn8.ppl(n) for n in yarn8.lengths}


def test_rope_zero_shot_takes_no_rope_method_its_claims_compare_scalings_with_none():
    from attnlab.experiments.config import resolve
    from attnlab.rope.experiments import ZeroShotConfig

    with pytest.raises(UsageError, match="compares each of --scalings with none"):
        resolve(ZeroShotConfig, {"methods": "yarn"})
    assert [m.spec() for m in resolve(ZeroShotConfig, {"methods": "int8"}).methods_applied()] == ["int8"]


def test_the_evaluations_are_functions_of_the_model(folder):
    """The commands' numbers are the evaluation of the model with the scaling wrapped around it by the
    caller: long_ppl / passkey_grid know nothing of RoPE."""
    from attnlab.evals.inputs import load_model
    from attnlab.evals.passkey import build_prompts, passkey_grid
    from attnlab.experiments.runner import RunContext
    from attnlab.rope.compare import longppl_by_scaling, passkey_by_scaling

    model, tok = load_model(str(folder[0]))
    ids = torch.randint(0, 255, (200,), generator=torch.Generator().manual_seed(3))
    ctx = RunContext(out=None, show_progress=False)
    scalings = [make_scaling("none"), make_scaling("dynamic-ntk", 2.0), make_scaling("yarn", 2.0)]
    curves = longppl_by_scaling(model, ids, scalings, [32, 96], 16, 2, ctx)
    cases = passkey_cases([400], [0.0, 1.0], 1)
    grids = passkey_by_scaling(model, tok, scalings, cases, ctx)
    for s in scalings:
        with ScaledRope(model, s):
            assert long_ppl(model, ids, [32, 96], 16, 2).nll == curves[s.describe()].nll
            rows = passkey_grid(model, tok, build_prompts(tok, cases))
        assert [r.text for r in rows] == [r.text for r in grids[s.describe()]]


def test_zero_windows_score_every_stride():
    """windows=0 is the full protocol for longppl and rope-zero-shot alike (it once scored no window at all)."""
    from attnlab.experiments.runner import RunContext
    from attnlab.rope.compare import longppl_by_scaling

    model, ids = tiny_llama(), torch.randint(0, 300, (120,), generator=torch.Generator().manual_seed(5))
    ctx, none = RunContext(out=None, show_progress=False), [make_scaling("none")]
    every = longppl_by_scaling(model, ids, none, [32, 48], 16, 0, ctx)["none"]
    assert every.nll == longppl_by_scaling(model, ids, none, [32, 48], 16, None, ctx)["none"].nll
    assert len(every.nll[32]) == len(window_ends(120, 48, 16, None)) == 5


@pytest.mark.parametrize("cmd, argv, message", [
    ("passkey", ["--factor", "0.5"], "s >= 1"),
    ("passkey", ["--scalings", "none,ntkk"], "did you mean 'ntk'"),
    ("passkey", ["--lengths", "100000000000"], "shorter --lengths"),
    ("longppl", ["--model", "GPT2"], "no rotary position embedding"),
    ("longppl", ["--lengths", "64", "--stride", "128"], "every length > the stride"),
    ("longppl", ["--text", "/no/such/text.txt"], "--text PATH"),
    ("longppl", ["--stride", "0"], "--stride 0"),
    ("longppl", ["--windows", "-1"], "--windows -1"),
    ("longppl", ["--lengths", "32,64", "--stride", "16", "--tokens", "50"], "--tokens 50 is shorter"),
    ("passkey", ["--depths", "0,1.5"], "depths 1.5: a key depth lies in [0, 1]"),
    ("passkey", ["--depths=-0.5,0.5"], "depths -0.5"),
    ("passkey", ["--samples", "0"], "samples=0"),
    ("passkey", ["--lengths", "0,512"], "--lengths 0,512: give positive token counts"),
    ("passkey", ["--scalings", ""], "--scalings is empty"),
    ("longppl", ["--lengths", "abc"], "--lengths abc: expected a value of type int"),
    ("longppl", ["--windows", "two"], "--windows two: expected a value of type int"),
    ("longppl", ["--tokens", "none", "--lengths", "0"], "--lengths 0: give positive token counts"),
    ("longppl", ["--method", "h2o:budget=8"], "run without an evicting cache, so KV methods do not apply"),
    ("passkey", ["--method", "yarn:factor=0.5"], "need factor >= 1"),
])
def test_rope_commands_bad_input_is_one_line_exit_2(folder, tmp_path, capsys, cmd, argv, message):
    from attnlab.cli import main

    model, text = folder
    if "GPT2" in argv:
        g = save_gpt2(tmp_path / "gpt2")
        argv = [a if a != "GPT2" else str(g) for a in argv]
        capsys.readouterr()  # what saving the model printed (transformers' progress bar) is not the command's
    base = ([cmd, "--model", str(model), "--out", str(tmp_path / "o")]
            + (["--text", str(text)] if cmd == "longppl" else []))
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _config(argv: list[str]):
    """The config a command line resolves to, through the command's own parser."""
    from attnlab.cli import build_parser
    from attnlab.experiments import registry
    from attnlab.experiments.command import config_from_args

    args = build_parser().parse_args([*argv, "--out", "x"])
    return config_from_args(registry.get(args.experiment).config_cls, args)


def test_attnlab_passkey_is_the_passkey_experiment():
    """One experiment, one config: the command's flags are the registered passkey's fields (its claim
    thresholds aside), read by name as `attnlab reproduce passkey --set` reads them."""
    from attnlab.experiments import registry
    from attnlab.experiments.config import resolve
    from attnlab.rope.configs import PasskeyConfig

    cfg = _config(["passkey", "--scalings", "none,yarn", "--factor", "4", "--lengths", "4096,8192", "--depths", "0,1",
                   "--samples", "3", "--seed", "7"])
    assert registry.get("passkey").config_cls is PasskeyConfig
    assert cfg == resolve(PasskeyConfig, {"scalings": "none,yarn", "factor": "4", "lengths": "4096,8192",
                                          "depths": "0,1", "samples": "3", "seed": "7"})
    assert (cfg.min_accuracy, cfg.max_accuracy_unscaled) == (0.8, 0.2)  # fixed before the first run: no flag
    assert (_config(["longppl", "--tokens", "none"]).tokens is None
            and _config(["longppl", "--tokens", "40000"]).tokens == 40000)


def test_longppl_and_zero_shot_refuse_the_same_windows():
    from attnlab.experiments import registry
    from attnlab.experiments.config import resolve

    zero_shot = registry.get("rope-zero-shot").config_cls
    for key, value, says in (("stride", "0", "--stride 0"), ("windows", "-1", "--windows -1"),
                             ("ppl_lengths", "64,512", "ppl_lengths 64: need every length > the stride")):
        with pytest.raises(UsageError, match=says):
            resolve(zero_shot, {key: value, **({"stride": "128"} if key == "ppl_lengths" else {})})


@pytest.mark.slow
def test_pi_finetune_runs_small_and_saves_its_scaling(tmp_path, monkeypatch):
    """The experiment end to end at toy size: the table (same tokens, 1/2/4 x the window) per scaling before
    and after fine-tuning, the claims, the curves, and a PI model that reloads with linear RoPE scaling."""
    import json

    from transformers import AutoModelForCausalLM

    from attnlab.cli import main

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat and the dog ran to the cat.\n" * 400)
    sets = {"text": text, "vocab_size": 300, "d_model": 16, "layers": 1, "heads": 2, "kv_heads": 1, "d_ffn": 32,
            "short": 16, "long": 64, "base_batch": 4, "base_steps": 6, "finetune_steps": 10, "eval_every": 5,
            "suffice_steps": 5, "eval_batches": 2, "batch_size": 2, "table_windows": 3}
    out = tmp_path / "pi"
    argv = ["reproduce", "pi-finetune", "--out", str(out)] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    assert main(argv) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["windows"] == [16, 32, 64] and set(m["table"]) == {"none", "pi", "ntk", "yarn"}
    assert len(m["claims"]) == 6 + 1 + 2  # PI's table, NTK's, YaRN's two
    for name, row in m["table"].items():
        assert len(row["before"]) == len(row["after"]) == 3 and m["curves"][name]["steps"] == [0, 5, 10]
    # one base for every scaling, read under each one's frequencies: PI's differ from none's inside the window too
    assert m["table"]["none"]["before"][0] != m["table"]["pi"]["before"][0]
    cfg = json.loads((out / "pi_model" / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_type"] == "linear" and cfg["rope_parameters"]["factor"] == 4.0
    reloaded = AutoModelForCausalLM.from_pretrained(out / "pi_model")
    pi_freq, _ = make_scaling("pi", 4.0).frequencies(10000.0, 8, 16)  # head dim 16 / 2 heads
    torch.testing.assert_close(reloaded.model.rotary_emb.inv_freq, pi_freq, atol=0, rtol=1e-6)
    assert (out / "pi_finetune.png").stat().st_size > 0


def test_pi_finetune_table_is_one_protocol_for_every_window(tmp_path):
    """A row scores the same held-out tokens at every window: with windows that all fit inside the trained
    context and no position dependence beyond it, a model that ignores position (here: a 1-token context
    bigram, its attention only on itself) gives the same PPL at 1, 2 and 4 x the window."""
    from attnlab.rope.exp_pi_finetune import PIFinetuneConfig, table_row

    class Bigram(torch.nn.Module):  # logits from the current token alone: context length cannot matter
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(50, 50)

        def forward(self, input_ids, logits_to_keep, use_cache=False):
            return type("Out", (), {"logits": self.table(input_ids)[:, logits_to_keep]})

    class Wrapped:
        hf = Bigram()

    ids = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(0))
    row = table_row(Wrapped(), ids, PIFinetuneConfig(short=16, long=64, table_windows=5))
    assert row[0] == pytest.approx(row[1], rel=1e-12) and row[1] == pytest.approx(row[2], rel=1e-12)


def test_pi_finetune_config_refuses_what_the_table_cannot_read():
    from attnlab.core.errors import ConfigError
    from attnlab.rope.exp_pi_finetune import PIFinetuneConfig

    with pytest.raises(ConfigError, match="long = 4 x short"):
        PIFinetuneConfig(short=64, long=512)
    with pytest.raises(ConfigError, match="suffice_steps"):
        PIFinetuneConfig(suffice_steps=150)
    with pytest.raises(ConfigError, match="none and pi included"):
        PIFinetuneConfig(scalings=("ntk", "yarn"))
    with pytest.raises(ConfigError, match="name some of"):
        PIFinetuneConfig(scalings=("none", "pi", "rerope"))


@pytest.mark.slow
def test_rope_experiments_state_their_claims(folder, tmp_path):
    """rope-zero-shot end to end on the tiny model (trained context 64): 4 passkey claims (PI has
    none), the PPL blow-up, 3 bounded curves and PI vs NTK at short range; passkey: its 4."""
    import json

    from attnlab.cli import main

    model, text = folder
    sets = {"model": model, "text": text, "lengths": "400", "depths": "0,1", "samples": 1,
            "ppl_lengths": "32,64,128", "stride": 16, "windows": 1}
    for name, n_claims in (("rope-zero-shot", 9), ("passkey", 4)):
        out = tmp_path / name
        argv = ["reproduce", name, "--out", str(out)]
        argv += [a for k, v in sets.items()
                 if name == "rope-zero-shot" or k in ("model", "lengths", "depths", "samples")
                 for a in ("--set", f"{k}={v}")]
        assert main(argv) == 0
        metrics = json.loads((out / "metrics.json").read_text())
        claims = metrics["claims"]
        assert len(claims) == n_claims
        per_prompt = {k: [r["correct"] for r in rows] for k, rows in metrics["passkey"].items()}
        assert metrics["accuracy_by_scaling"] == {k: sum(v) / len(v) for k, v in per_prompt.items()}
        assert metrics["accuracy"] == sum(map(sum, per_prompt.values())) / sum(map(len, per_prompt.values()))
        assert all({"measured", "expected", "tolerance", "holds"} <= set(c) for c in claims)
