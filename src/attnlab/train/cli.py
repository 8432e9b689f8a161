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
import sys
from pathlib import Path

from attnlab.core.errors import UsageError, check_number
from attnlab.core.io import write_json
from attnlab.core.variant_names import VARIANTS
from attnlab.train.folder import check_out, check_resume, remove_start

GROUP = "training"

MODEL_DEFAULTS = {  # --layers, --heads, --d-model, --d-ffn, --dropout, --act when not given
    "tutorial": {"layers": 1, "heads": 1, "d_model": 200, "d_ffn": 200, "dropout": 0.2},
    "llama": {"layers": 4, "heads": 4, "d_model": 256, "d_ffn": 768, "dropout": 0.0, "act": "silu"},
}
ARCH_FLAGS = ("layers", "heads", "kv_heads", "d_model", "d_ffn", "dropout", "max_len", "rope_theta", "act",
              "attention")
LLAMA_ONLY = ("kv_heads", "max_len", "rope_theta", "act", "attention")
ACTS = ("silu", "relu", "gelu")  # the MLP gate's activation (transformers' hidden_act names)
NOT_SETTINGS = ("func", "argv")  # put on args by attnlab.cli: how it was called, not what the run is


def add_commands(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a language model on a text corpus, tracking attention entropy as it learns",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument("--train", required=True, help="training text: a file, a folder of *.txt, or a corpus name")
    p.add_argument("--valid", help="validation text (default: none, no validation loss)")
    p.add_argument("--holdout", type=float, metavar="FRACTION",
                   help="without --valid: validate on the last FRACTION of the training lines (e.g. 0.05)")
    p.add_argument("--out", required=True, type=Path, help="run folder")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    m = p.add_argument_group("model and tokenizer")
    m.add_argument("--model", default="tutorial",
                   help="tutorial (post-LN, the authors'), llama (a new Llama-style decoder) or the path of a "
                        "Hugging Face causal-LM folder to fine-tune (default: tutorial)")
    m.add_argument("--tokenizer",
                   help="word (basic_english), bpe (byte-level, trained on --train and cached) or a tokenizer "
                        "folder (default: word for tutorial, bpe for llama, the model's own for a folder)")
    m.add_argument("--vocab-size", "--max-vocab", dest="vocab_size", type=int,
                   help="word: vocabulary limit, <unk> included (default: every word); bpe: size (default 4096)")
    m.add_argument("--layers", type=int, help="blocks (default: 1 tutorial, 4 llama)")
    m.add_argument("--heads", type=int, help="attention heads (default: 1 tutorial, 4 llama)")
    m.add_argument("--kv-heads", type=int, help="llama: key/value heads, grouped-query (default: heads/2)")
    m.add_argument("--d-model", type=int, help="width (default: 200 tutorial, 256 llama)")
    m.add_argument("--d-ffn", type=int, help="feed-forward width (default: 200 tutorial, 768 llama)")
    m.add_argument("--dropout", type=float, help="dropout (default: 0.2 tutorial, 0 llama: attention only)")
    m.add_argument("--max-len", type=int, help="llama: max_position_embeddings (default: --bptt)")
    m.add_argument("--rope-theta", type=float, help="llama: RoPE base (default 10000)")
    m.add_argument("--act", choices=ACTS,
                   help="llama: the MLP gate's activation in down(act(gate(x))*up(x)): silu (SwiGLU), relu (exact "
                        "zeros where gate(x) < 0: a naturally sparse model) or gelu (default silu)")
    m.add_argument("--attention", choices=VARIANTS,
                   help="llama: the attention variant (saved in the checkpoint): softmax (vanilla), softmax1 "
                        "(off-by-one: a zero logit joined to each row), sink-logit (a learned logit per head, "
                        "gpt-oss), gated (a sigmoid gate per head on the output, Qwen), sink-token (a new "
                        "vocabulary entry prepended to every sample, StreamingLLM's learnable sink) or relu "
                        "(relu(x)/n, no softmax: Guo et al.'s intervention); default softmax")
    t = p.add_argument_group("training")
    t.add_argument("--optimizer", default="sgd", help="sgd, adam or adamw (default sgd)")
    t.add_argument("--lr", type=float, default=5.0)
    t.add_argument("--weight-decay", type=float, default=0.0,
                   help="weight decay (decoupled for adamw; Gu et al.: larger values encourage sinks; default 0)")
    t.add_argument("--group-lr", action="append", default=[], metavar="GLOB=LR",
                   help="learning rate for parameters whose name matches GLOB (repeatable)")
    t.add_argument("--clip", type=float, default=0.5, help="max gradient norm (0: off)")
    t.add_argument("--batching", default="bptt", help="bptt (the tutorial's parallel streams) or random windows")
    t.add_argument("--batch-size", type=int, default=20)
    t.add_argument("--bptt", type=int, default=35, help="sequence length")
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--track-every", type=int, default=100)
    t.add_argument("--eval-every", type=int, default=500)
    t.add_argument("--snapshot-steps", default="", help="comma-separated steps to keep attention maps at")
    t.add_argument("--checkpoint-every", type=int, default=500)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_train)


def _settings(args) -> dict:
    """The run's settings as written to config.json and compared by --resume (paths as strings):
    every parsed option, less NOT_SETTINGS; "command": "train" marks the folder as a train run."""
    parsed = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in NOT_SETTINGS}
    return {**parsed, "command": "train"}


def _check_model_args(args) -> None:
    """--model and the architecture flags agree, before anything is read or built."""
    flag = lambda k: f"--{k.replace('_', '-')}"  # noqa: E731
    if args.model in MODEL_DEFAULTS:
        if args.model == "tutorial" and (extra := [flag(k) for k in LLAMA_ONLY if getattr(args, k) is not None]):
            why = "; the tutorial's feed-forward is always an ungated ReLU" if args.act is not None else ""
            verb, them = ("applies", "it") if len(extra) == 1 else ("apply", "them")
            raise UsageError(f"{', '.join(extra)} {verb} to --model llama only (add --model llama or leave {them} "
                             f"out{why})")
        return
    if not (Path(args.model).expanduser() / "config.json").is_file():
        raise UsageError(f"--model {args.model}: use tutorial, llama or a Hugging Face model folder (one with "
                         "config.json, e.g. the model/ folder of an attnlab train run)")
    if given := [flag(k) for k in ARCH_FLAGS if getattr(args, k) is not None]:
        raise UsageError(f"{', '.join(given)} shape a new model; --model {args.model} is loaded as it is")


def _build_model(args, vocab_size: int, sink_id: int | None = None):
    """The new model named by --model (tutorial or llama), architecture defaults filled in."""
    import torch

    arch = {k: v if (v := getattr(args, k)) is not None else MODEL_DEFAULTS[args.model].get(k) for k in ARCH_FLAGS}
    torch.manual_seed(args.seed)
    if args.model == "tutorial":
        from attnlab.train.tutorial import TutorialConfig, TutorialTransformer

        return TutorialTransformer(TutorialConfig(vocab_size, arch["d_model"], arch["heads"], arch["d_ffn"],
                                                  arch["layers"], arch["dropout"]))
    from attnlab.models.causal_lm import LlamaLMConfig, build_llama

    heads, attention = arch["heads"], arch["attention"] or "softmax"
    return build_llama(LlamaLMConfig(
        vocab_size, arch["d_model"], arch["layers"], heads,
        arch["kv_heads"] or (heads // 2 if heads % 2 == 0 else heads), arch["d_ffn"],
        (arch["max_len"] or args.bptt) + (attention == "sink-token"),  # the sink takes a position of its own
        arch["rope_theta"] or 10000.0, arch["dropout"], act=arch["act"], attention=attention,
        sink_token_id=sink_id if attention == "sink-token" else None))


def _train_config(args):
    """The TrainConfig the flags describe (ConfigError/UsageError naming the flag otherwise)."""
    from attnlab.train.trainer import TrainConfig

    if args.vocab_size is not None and args.vocab_size < 1:
        raise UsageError(f"vocabulary limit {args.vocab_size}: use at least 1 (or leave it out)")
    try:
        snaps = tuple(int(s) for s in args.snapshot_steps.split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--snapshot-steps {args.snapshot_steps!r}: give comma-separated integers") from None
    return TrainConfig(optimizer=args.optimizer, lr=args.lr, group_lrs=tuple(args.group_lr), clip=args.clip,
                       weight_decay=args.weight_decay,
                       batching=args.batching, batch_size=args.batch_size, bptt=args.bptt, steps=args.steps,
                       track_every=args.track_every, eval_every=args.eval_every, snapshot_steps=snaps,
                       checkpoint_every=args.checkpoint_every, seed=args.seed)


def _read_splits(args) -> tuple[list[str], list[str] | None]:
    """(training lines, validation lines or None) from --train, --valid or --holdout."""
    from attnlab.data.corpus import split_tail
    from attnlab.data.sources import read_corpus

    if args.holdout is not None and (args.valid or not 0 < args.holdout < 1):
        raise UsageError(f"--holdout {args.holdout}: give a fraction in (0, 1), and no --valid with it")
    train_lines = read_corpus(args.train, "--train", "--train PATH")
    valid_lines = read_corpus(args.valid, "--valid", "--valid PATH") if args.valid else None
    if args.holdout:
        train_lines, valid_lines = split_tail(train_lines, args.holdout)
        for side, lines in (("training", train_lines), ("held-out", valid_lines)):
            if not any(line.strip() for line in lines):  # refused before a tokenizer is trained on nothing
                _short_split(args, side, 0)
    return train_lines, valid_lines


def _check_split(args, train_ids, valid_ids) -> None:
    """--holdout must leave each side at least one training window (--bptt inputs and their next tokens)."""
    if args.holdout:
        for side, ids in (("training", train_ids), ("held-out", valid_ids)):
            if ids.numel() < args.bptt + 1:
                _short_split(args, side, ids.numel())


def _short_split(args, side: str, tokens: int) -> None:
    fix = "a smaller" if side == "training" else "a larger"
    raise UsageError(f"--holdout {args.holdout} leaves the {side} part {tokens} tokens, fewer than one training "
                     f"window (--bptt {args.bptt} + 1 = {args.bptt + 1}): give a longer text or {fix} --holdout")


def _check_numbers(args) -> None:
    """Every numeric flag through the check every option goes through: NaN, infinity (which slip past the
    range checks below, a NaN comparing false with every bound) and integers no tensor holds are refused."""
    for key, value in vars(args).items():
        check_number(key, value, where=f"--{key.replace('_', '-')} {value}")


def _model_and_tokenizer(args, train_lines: list[str], resume: bool):
    """(model, tokenizer): a resumed run's own tokenizer, a loaded --model folder or a new model."""
    from attnlab.models.tokenizer import load_tokenizer, make_tokenizer

    loaded = None
    if args.model not in MODEL_DEFAULTS:
        from attnlab.models.causal_lm import load_causal_lm

        loaded = load_causal_lm(args.model)
    if resume:  # the run's own tokenizer, whatever the text would give now
        tokenizer = load_tokenizer(args.out / "tokenizer")
    else:
        spec = args.tokenizer or {"tutorial": "word", "llama": "bpe"}.get(args.model, args.model)
        tokenizer = make_tokenizer(spec, train_lines, args.vocab_size)
        if args.attention == "sink-token":
            tokenizer.add_sink()  # a new vocabulary entry, never produced by encoding text
    if loaded is not None and loaded.hf.config.vocab_size < tokenizer.vocab_size:
        raise UsageError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's embedding only "
                         f"{loaded.hf.config.vocab_size}: use the model's own tokenizer")
    return loaded or _build_model(args, tokenizer.vocab_size, tokenizer.sink_id), tokenizer


def cmd_train(args) -> int:
    from attnlab.experiments.runner import check_device, refused_write
    from attnlab.train.plots import training_figure
    from attnlab.train.trainer import Trainer

    _check_numbers(args)
    device = check_device(args.device)
    out: Path = args.out
    resume = check_out(out, args.resume)
    _check_model_args(args)
    cfg = _train_config(args)
    settings = _settings(args)
    if args.resume:  # before any text is read or tokenizer built: a changed setting is the first thing to fix
        check_resume(out, settings)
    train_lines, valid_lines = _read_splits(args)
    model, tokenizer = _model_and_tokenizer(args, train_lines, resume)
    train_ids = tokenizer.encode_lines(train_lines)
    valid_ids = None if valid_lines is None else tokenizer.encode_lines(valid_lines)
    _check_split(args, train_ids, valid_ids)
    trainer = Trainer(model, train_ids, valid_ids, cfg, out, device)
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
        training_figure(lines, trainer.snapshots, out / "training.png", f"{args.model} on {args.train}")
        saved = ""
        if hasattr(model, "save_pretrained"):
            folder = model.save_pretrained(out / "model", tokenizer)
            # a softmax Llama is a plain transformers model; a variant loads through attnlab, which registers it
            plain = (getattr(args, "attention", None) or "softmax") == "softmax"
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
