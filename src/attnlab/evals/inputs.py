"""What an evaluation runs on: a pretrained model by name, on a device, and the first N tokens of a text."""
from __future__ import annotations

import torch

from attnlab.core.errors import ConfigError, MissingResource, UsageError
from attnlab.data.sources import read_corpus
from attnlab.models.variants import sink_token_id


def load_model(name: str, device: str = "cpu"):
    """(model on ``device``, tokenizer) for an alias, model folder, train run or hub id;
    MissingResource when it is not cached here (the demo then skips the experiment)."""
    from attnlab.models.pretrained import load_model_and_tokenizer, resolve_model

    try:
        resolve_model(name)
    except UsageError as e:
        raise MissingResource(str(e)) from None
    model, tok = load_model_and_tokenizer(name)
    return model.to(device), tok


def first_ids(tok, lines: list[str], tokens: int) -> list[int]:
    """At most the first ``tokens`` token ids of ``lines``, each line with its line break (tokenising only
    what is needed: 2,000 lines at a time)."""
    ids, used = [], 0
    while len(ids) < tokens and used < len(lines):
        chunk = "".join(line + "\n" for line in lines[used:used + 2000])
        used += 2000
        ids += tok(chunk, add_special_tokens=False)["input_ids"]
    return ids[:tokens]


def text_ids(tok, text: str, tokens: int, fix: str | None = None) -> torch.Tensor:
    """The first ``tokens`` token ids (T,) of ``text`` (a corpus name or file), its line breaks kept (the
    model sees the text as written: joined without them, KJV's verses and War and Peace's wrapped lines
    run words together, which doubles SmolLM2's PPL on them); ConfigError if shorter.
    ``fix``: how the caller's user names the text (default ``--set text=PATH``)."""
    ids = first_ids(tok, read_corpus(text, "text", fix), tokens)
    if len(ids) < tokens:
        raise ConfigError(f"text={text} has only {len(ids)} tokens; need tokens={tokens}: ask for fewer, or give "
                          f"a longer text with {fix or '--set text=PATH'}")
    return torch.tensor(ids)


def calibration_ids(ctx, method) -> torch.Tensor:
    """(T,) token ids on ``ctx.device`` (a method's Context) of the calibration text a calibrated ``method``
    names (its options ``calibration`` and ``calibration_tokens``: attnlab.methods.base.CALIBRATION)."""
    if ctx.tokenizer is None:
        raise UsageError(f"{method.name} calibrates on a text: give the model's tokenizer "
                         "(attnlab.apply(model, ..., tokenizer=tok))")
    return text_ids(ctx.tokenizer, method.calibration, method.calibration_tokens,
                    f"--method {method.name}:calibration=PATH").to(ctx.device)


def load_stream(name: str, text: str, tokens: int, device: str = "cpu", fix: str | None = None):
    """The model (on ``device``) and the first ``tokens`` token ids (T,) of ``text``; a model pre-trained
    with a sink token gets it first, as in training (T+1 ids then)."""
    model, tok = load_model(name, device)
    return model, with_sink(model, text_ids(tok, text, tokens, fix))


def with_sink(model, ids: torch.Tensor) -> torch.Tensor:
    """ids (T,) -> (T+1,) led by the model's sink token, if it was pre-trained with one; else ids."""
    sink = sink_token_id(model)
    return ids if sink is None else torch.cat([ids.new_full((1,), sink), ids])
