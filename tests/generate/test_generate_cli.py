"""``attnlab generate --method``: the command decodes what the stack's own generate decodes (eager, or through the
compiled step), and every check that needs no model comes before one loads."""
import argparse

import pytest
import torch

import attnlab
from attnlab.cli import main
from attnlab.models.pretrained import load_model_and_tokenizer
from tiny_models import byte_tokenizer, tiny_llama

PROMPT = "the cat sat on the mat and the dog ran"




def _folder(path):
    """A tiny llama with its byte tokenizer, its matrices 3x their init: at init a tiny model's greedy text is
    one token repeated whatever it attends to, so no method could change it."""
    model = tiny_llama(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3)
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def _argv(folder, *methods, new=16):
    return (["generate", "--model", str(folder), "--prompt", PROMPT, "--max-new-tokens", str(new)]
            + [a for m in methods for a in ("--method", m)])


def _greedy(folder, *methods, new=16) -> tuple[str, int]:
    """The text the stack's own generate decodes, greedy, and its new tokens: ``methods`` entered by
    attnlab.apply."""
    model, tok = load_model_and_tokenizer(str(folder))
    ids = tok(PROMPT, return_tensors="pt", add_special_tokens=False).input_ids
    with attnlab.apply(model, *methods, tokenizer=tok):
        out = model.generate(ids, max_new_tokens=new, do_sample=False, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0].tolist()), out.shape[1] - ids.shape[1]


@pytest.mark.parametrize("methods", [("h2o:budget=12,positions=rolling",),
                                     ("int8", "yarn:factor=2", "sinks:budget=12")])
def test_generate_under_methods_decodes_what_the_stack_decodes(tmp_path, capsys, methods):
    folder = _folder(tmp_path / "model")
    assert main(_argv(folder, *methods)) == 0
    said = capsys.readouterr()
    want, n = _greedy(folder, *methods)
    assert said.out == want + "\n"
    assert want != _greedy(folder)[0]  # the methods change what is decoded: a flag left unread would show
    stack = ";".join(m.spec() for m in attnlab.methods.ordered(list(methods)))  # the stack's order, not the flags'
    assert f"\nunder {stack}\n" in said.err
    # the prompt's forward and the decode steps apart: the first new token is the prompt forward's
    assert f"\nprompt: {len(PROMPT)} tokens in " in said.err and f"; decode: {n - 1} tokens in " in said.err


@pytest.mark.slow
def test_generate_compiles_under_a_weight_scheme_the_tokens_eager_writes(tmp_path, capsys):
    folder = _folder(tmp_path / "model")
    assert main(_argv(folder, "int8", "full", new=8) + ["--compile"]) == 0  # full: the static cache's policy
    said = capsys.readouterr()
    want, n = _greedy(folder, "int8", new=8)
    assert said.out == want + "\n"
    assert "compiled the decode step in" in said.err and f"; decode: {n - 1} tokens in " in said.err


@pytest.mark.slow
@pytest.mark.parametrize("methods", [("h2o:budget=12,positions=rolling",),
                                     ("int8", "yarn:factor=2", "sinks:budget=12")])
def test_generate_compiles_an_evicting_cache_the_tokens_eager_writes(tmp_path, capsys, methods):
    """An evicting KV method decodes eager until its cache is full, then through its compiled steady step
    (attnlab.kv.steady): the text the stack's own generate writes under the same methods."""
    folder = _folder(tmp_path / "model")
    assert main(_argv(folder, *methods) + ["--compile"]) == 0
    said = capsys.readouterr()
    assert said.out == _greedy(folder, *methods)[0] + "\n"
    assert "compiled the decode step in" in said.err


@pytest.mark.parametrize("extra, fragment", [
    (["--method", "bogus"], "unknown method 'bogus'"),
    (["--method", "h2o:budgt=8"], "h2o has no option 'budgt'"),
    (["--method", "int8", "--method", "int4"], "one weight scheme at a time"),
    (["--method", "h2o:budget=0.5", "--compile"], "drop --method h2o:budget=0.5 (or --compile)"),
    (["--method", "adakv:budget=8", "--compile"], "shares a layer's budget over its heads"),
    (["--method", "teal:mode=gather", "--compile"], "drop --method teal:mode=gather (or --compile)"),
    (["--method", "dynamic-ntk:factor=4", "--compile"], "frequencies follow the length"),
    (["--temperature", "0.5", "--compile"], "--compile decodes greedily"),
    (["--compile", "c"], "give one of python, cpp"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
])
def test_generate_refuses_bad_input_before_the_model_loads(tmp_path, capsys, extra, fragment):
    """One line and exit 2, naming the fix; the model folder does not exist, so a check made after loading it
    would say that instead."""
    argv = ["generate", "--model", str(tmp_path / "no-such-model"), "--prompt", "x"] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab: error: ") and fragment in err and err.count("\n") == 1


def test_the_clock_times_the_prompt_and_the_decode_apart(monkeypatch):
    from attnlab.generate import cli

    now = iter([10.0, 10.5, 14.0])  # start, the prompt's forward done (asked twice: read once), the end
    monkeypatch.setattr(cli.time, "perf_counter", lambda: next(now))
    clock = cli.Clock()
    scores = torch.ones(1, 3)
    assert clock(None, scores) is scores and clock(None, scores) is scores  # a logits processor: scores as given
    assert clock.report(4, 7) == "prompt: 4 tokens in 0.50 s (8.0 tokens/s); decode: 6 tokens in 3.50 s (1.7 tokens/s)"


def test_generate_is_its_own_capabilitys_command():
    from attnlab.generate import cli
    from attnlab.models import cli as models_cli

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    cli.add_commands(sub)
    assert cli.GROUP == "models" and set(sub.choices) == {"generate"}
    assert sub.choices["generate"].get_default("func") is cli.cmd_generate
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    models_cli.add_commands(sub)
    assert set(sub.choices) == {"models"}

