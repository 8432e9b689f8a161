"""``attnlab train``: the tracking trainer on your own corpus, into a run folder.

Models: the PyTorch tutorial transformer (post-LN, the Scan&Snap/JoMA authors' model), a
Llama-style decoder built from a transformers ``LlamaConfig`` (gated MLP down(act(gate(x))·up(x)):
``--act silu`` is SwiGLU as in SmolLM2, ``--act relu`` gives exact zeros, the naturally sparse
control for contextual-sparsity studies), or any local Hugging Face causal-LM folder (fine-tuning
it). Tokenizers: the word-level ``basic_english`` scheme, a byte-level BPE trained on the training
text (cached), or any saved tokenizer folder.

The folder gets config.json, tokenizer/ (a Hugging Face tokenizer folder), metrics.jsonl (one
line per tracked step), checkpoint.pt, training.png (entropy per layer, losses, attention maps)
and, for Hugging Face models, model/: a standard checkpoint folder (config + safetensors +
tokenizer) that ``attnlab.models.causal_lm.load_causal_lm`` loads (and, for a softmax model,
``AutoModelForCausalLM.from_pretrained``; an attention variant needs attnlab's loader, which registers it).
``--resume`` continues a run that was stopped (or extends a finished one to a larger ``--steps``) and refuses
a folder written with other settings. A start stopped before its first checkpoint has nothing to resume: the
same command, with or without ``--resume``, starts it again. Nothing in an existing folder is touched before
the input is checked; a folder holding other files or another experiment's run is refused; a failed start (a
full disk, Ctrl-C) removes what it wrote, and a run that fails later keeps its last checkpoint.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.core.io import write_json
from attnlab.experiments.command import add_config_flags
from attnlab.train.configs import DATA_FIELDS, MODEL_DEFAULTS, MODEL_FIELDS, TrainRun
from attnlab.train.folder import check_out, check_resume, remove_start

GROUP = "training"
RUN_FLAGS = ("out", "resume", "device")  # where and how a run goes, not what it is: the command's, not TrainRun's


def add_commands(sub) -> None:
    from attnlab.experiments.command import HelpFormatter

    p = sub.add_parser(
        "train",
        help="train a language model on a text corpus, tracking attention entropy as it learns",
        description=__doc__,
        formatter_class=HelpFormatter,
        epilog="examples:\n"
        "  attnlab train --train wikitext-2/valid.txt --valid wikitext-2/test.txt --out runs/lm1 --steps 2000\n"
        "  attnlab train --train my_corpus/ --out runs/lm5 --layers 5 --optimizer adam --lr 1e-4\n"
        "  attnlab train --train my.txt --out runs/lm1 --group-lr 'layers.0.linear*=10' --resume\n"
        "  attnlab train --model llama --train tinyshakespeare/input.txt --out runs/llama --optimizer adam \\\n"
        "      --lr 1e-3 --batching random --bptt 256 --batch-size 8 --steps 1000   # -> runs/llama/model/\n"
        "  attnlab train --model llama --act relu --train tinyshakespeare/input.txt --out runs/llama-relu \\\n"
        "      --optimizer adam --lr 1e-3 --batching random --bptt 256 --batch-size 8 --steps 1000   # ReLU-gated MLP\n"
        "  attnlab train --model runs/llama/model --train kjv/kjv.txt --out runs/llama-kjv --optimizer adam --lr 3e-4\n"
        "Corpus names like wikitext-2/valid.txt are looked up under $ATTNLAB_DATA, ./data and ../shared/data,\n"
        "then among the texts that ship with attnlab (Shakespeare, KJV, War and Peace, WikiText-2 valid/test);\n"
        "hf:OWNER/NAME/CONFIG:SPLIT reads a Hugging Face dataset when the network allows.",
    )
    every = tuple(f.name for f in dataclasses.fields(TrainRun))
    others = lambda group: tuple(f for f in every if f not in group)  # noqa: E731 -- a help group's flags alone
    add_config_flags(p, TrainRun, skip=others(DATA_FIELDS))  # the text, then the run's own flags
    p.add_argument("--out", required=True, type=Path, help="run folder")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    add_config_flags(p.add_argument_group("model and tokenizer"), TrainRun, skip=others(MODEL_FIELDS))
    add_config_flags(t := p.add_argument_group("training"), TrainRun, skip=DATA_FIELDS + MODEL_FIELDS)
    t.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--max-vocab", dest="vocab_size", help=argparse.SUPPRESS)  # the older name of --vocab-size
    p.set_defaults(func=cmd_train)


def _settings(cfg: TrainRun, args) -> dict:
    """The run's settings as written to config.json and compared by --resume (paths as strings): every field
    of the config, the run's own flags; "command": "train" marks the folder as a train run."""
    run = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k in RUN_FLAGS}
    return {**dataclasses.asdict(cfg), **run, "command": "train"}


def _build_model(cfg: TrainRun, vocab_size: int, sink_id: int | None = None):
    """The new model named by --model (tutorial or llama), architecture defaults filled in."""
    import torch

    arch = cfg.arch()
    torch.manual_seed(cfg.seed)
    if cfg.model == "tutorial":
        from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

        return TutorialTransformer(TutorialConfig(vocab_size, arch["d_model"], arch["heads"], arch["d_ffn"],
                                                  arch["layers"], arch["dropout"]))
    from attnlab.models.causal_lm import LlamaLMConfig, build_llama

    heads, attention = arch["heads"], arch["attention"] or "softmax"
    return build_llama(LlamaLMConfig(
        vocab_size, arch["d_model"], arch["layers"], heads,
        arch["kv_heads"] or (heads // 2 if heads % 2 == 0 else heads), arch["d_ffn"],
        (arch["max_len"] or cfg.bptt) + (attention == "sink-token"),  # the sink takes a position of its own
        arch["rope_theta"] or 10000.0, arch["dropout"], act=arch["act"], attention=attention,
        sink_token_id=sink_id if attention == "sink-token" else None))


def _read_splits(cfg: TrainRun) -> tuple[list[str], list[str] | None]:
    """(training lines, validation lines or None) from --train, --valid or --holdout."""
    from attnlab.data.corpus import split_tail
    from attnlab.data.sources import read_corpus

    if cfg.holdout is not None and cfg.valid:
        raise UsageError(f"--holdout {cfg.holdout} and --valid: give one of them (--holdout validates on the tail "
                         "of --train)")
    train_lines = read_corpus(cfg.train, "--train", "--train PATH")
    valid_lines = read_corpus(cfg.valid, "--valid", "--valid PATH") if cfg.valid else None
    if cfg.holdout:
        train_lines, valid_lines = split_tail(train_lines, cfg.holdout)
        for side, lines in (("training", train_lines), ("held-out", valid_lines)):
            if not any(line.strip() for line in lines):  # refused before a tokenizer is trained on nothing
                _short_split(cfg, side, 0)
    return train_lines, valid_lines


def _check_split(cfg: TrainRun, train_ids, valid_ids) -> None:
    """--holdout must leave each side at least one training window (--bptt inputs and their next tokens)."""
    if cfg.holdout:
        for side, ids in (("training", train_ids), ("held-out", valid_ids)):
            if ids.numel() < cfg.bptt + 1:
                _short_split(cfg, side, ids.numel())


def _short_split(cfg: TrainRun, side: str, tokens: int) -> None:
    fix = "a smaller" if side == "training" else "a larger"
    raise UsageError(f"--holdout {cfg.holdout} leaves the {side} part {tokens} tokens, fewer than one training "
                     f"window (--bptt {cfg.bptt} + 1 = {cfg.bptt + 1}): give a longer text or {fix} --holdout")


def _model_and_tokenizer(cfg: TrainRun, out: Path, train_lines: list[str], resume: bool):
    """(model, tokenizer): a resumed run's own tokenizer, a loaded --model folder or a new model."""
    from attnlab.models.tokenizer import load_tokenizer, make_tokenizer

    loaded = None
    if cfg.model not in MODEL_DEFAULTS:
        from attnlab.models.causal_lm import load_causal_lm

        loaded = load_causal_lm(cfg.model)
    if resume:  # the run's own tokenizer, whatever the text would give now
        tokenizer = load_tokenizer(out / "tokenizer")
    else:
        spec = cfg.tokenizer or {"tutorial": "word", "llama": "bpe"}.get(cfg.model, cfg.model)
        tokenizer = make_tokenizer(spec, train_lines, cfg.vocab_size)
        if cfg.attention == "sink-token":
            tokenizer.add_sink()  # a new vocabulary entry, never produced by encoding text
    if loaded is not None and loaded.hf.config.vocab_size < tokenizer.vocab_size:
        raise UsageError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's embedding only "
                         f"{loaded.hf.config.vocab_size}: use the model's own tokenizer")
    return loaded or _build_model(cfg, tokenizer.vocab_size, tokenizer.sink_id), tokenizer


def cmd_train(args) -> int:
    from attnlab.experiments.command import config_from_args
    from attnlab.experiments.runner import check_device, refused_write
    from attnlab.train.plots import training_figure
    from attnlab.train.trainer import Trainer

    cfg = config_from_args(TrainRun, args)  # every flag parsed and checked, naming it, before anything is read
    device = check_device(args.device)
    out: Path = args.out
    resume = check_out(out, args.resume)
    settings = _settings(cfg, args)
    if args.resume:  # before any text is read or tokenizer built: a changed setting is the first thing to fix
        check_resume(out, settings)
    train_lines, valid_lines = _read_splits(cfg)
    model, tokenizer = _model_and_tokenizer(cfg, out, train_lines, resume)
    train_ids = tokenizer.encode_lines(train_lines)
    valid_ids = None if valid_lines is None else tokenizer.encode_lines(valid_lines)
    _check_split(cfg, train_ids, valid_ids)
    trainer = Trainer(model, train_ids, valid_ids, cfg.trainer_config(), out, device)
    if not resume and out.is_dir() and any(out.iterdir()):
        print(f"attnlab train: {out} holds a start that stopped before its first checkpoint: starting again "
              "from step 0", file=sys.stderr)
    made = [p for p in (out.absolute(), *out.absolute().parents) if not p.exists()]  # innermost first
    try:
        if not resume:
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "config.json", settings)
            tokenizer.save(out / "tokenizer")
        lines = trainer.fit(resume=resume)
        training_figure(lines, trainer.snapshots, out / "training.png", f"{cfg.model} on {cfg.train}")
        saved = ""
        if hasattr(model, "save_pretrained"):
            folder = model.save_pretrained(out / "model", tokenizer)
            # a softmax Llama is a plain transformers model; a variant loads through attnlab, which registers it
            plain = (cfg.attention or "softmax") == "softmax"
            loader = "AutoModelForCausalLM.from_pretrained" if plain else "attnlab.models.causal_lm.load_causal_lm"
            saved = f"; Hugging Face checkpoint: {folder} ({loader})"
    except BaseException as e:
        step = trainer.checkpoint_step
        if not resume and step is None:  # nothing to resume: a start that failed leaves nothing behind
            remove_start(out, made)
        fix = (f"the run is kept up to its checkpoint at step {step}: free space, then add --resume"
               if step is not None else "")
        if (line := refused_write(e, out.absolute(), fix)) is None:
            raise
        raise UsageError(line) from None
    last = lines[-1]
    valid = f", valid loss {last['valid_loss']:.3f}" if "valid_loss" in last else ""
    print(f"attnlab train: {last['step']} steps, train loss {last['train_loss']:.3f}{valid}; "
          f"layer entropies {[round(sum(h) / len(h), 3) for h in last['entropy']]}; run: {out}/metrics.jsonl{saved}")
    return 0
