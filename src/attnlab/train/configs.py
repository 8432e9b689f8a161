"""The config of ``attnlab train``, torch-free: what to read, which model to build (or load) and how to train it.

Each field is one flag of ``attnlab train`` (``--d-model`` for ``d_model``), parsed and checked as every
command's config is (``attnlab.experiments.command``): NaN, infinity and numbers out of their bounds are refused
with the flag named, before any text is read. ``--out``, ``--resume`` and ``--device`` say where and how a run
goes, not what it is: they are the command's own flags.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.core.variant_names import VARIANTS
from attnlab.experiments.command import option
from attnlab.experiments.config import did_you_mean

MODEL_DEFAULTS = {  # --layers, --heads, --d-model, --d-ffn, --dropout, --act when not given
    "tutorial": {"layers": 1, "heads": 1, "d_model": 200, "d_ffn": 200, "dropout": 0.2},
    "llama": {"layers": 4, "heads": 4, "d_model": 256, "d_ffn": 768, "dropout": 0.0, "act": "silu"},
}
ARCH_FLAGS = ("layers", "heads", "kv_heads", "d_model", "d_ffn", "dropout", "max_len", "rope_theta", "act",
              "attention")
LLAMA_ONLY = ("kv_heads", "max_len", "rope_theta", "act", "attention")
ACTS = ("silu", "relu", "gelu")  # the MLP gate's activation (transformers' hidden_act names)
DATA_FIELDS = ("train", "valid", "holdout")  # the help's groups: the text, then MODEL_FIELDS, then the rest
MODEL_FIELDS = ("model", "tokenizer", "vocab_size", *ARCH_FLAGS)


def _flag(key: str) -> str:
    return f"--{key.replace('_', '-')}"


@dataclass(frozen=True)
class TrainRun:
    """One ``attnlab train`` run: corpus, model and tokenizer, optimiser and schedule."""

    train: str = option("", "training text: a file, a folder of *.txt, or a corpus name", required=True)
    valid: str | None = option(None, "validation text (default: none, no validation loss)")
    holdout: float | None = option(None, "without --valid: validate on the last FRACTION of the training lines "
                                   "(e.g. 0.05)", metavar="FRACTION", bounds="(0, 1)")
    model: str = option("tutorial", "tutorial (post-LN, the authors'), llama (a new Llama-style decoder) or the "
                        "path of a Hugging Face causal-LM folder to fine-tune")
    tokenizer: str | None = option(None, "word (basic_english), bpe (byte-level, trained on --train and cached) or a "
                                   "tokenizer folder (default: word for tutorial, bpe for llama, the model's own for "
                                   "a folder)")
    vocab_size: int | None = option(None, "word: vocabulary limit, <unk> included (default: every word); bpe: size "
                                    "(default 4096)", bounds=">= 1")
    layers: int | None = option(None, "blocks (default: 1 tutorial, 4 llama)", bounds=">= 1")
    heads: int | None = option(None, "attention heads (default: 1 tutorial, 4 llama)", bounds=">= 1")
    kv_heads: int | None = option(None, "llama: key/value heads, grouped-query (default: heads/2)", bounds=">= 1")
    d_model: int | None = option(None, "width (default: 200 tutorial, 256 llama)", bounds=">= 1")
    d_ffn: int | None = option(None, "feed-forward width (default: 200 tutorial, 768 llama)", bounds=">= 1")
    dropout: float | None = option(None, "dropout (default: 0.2 tutorial, 0 llama: attention only)",
                                   bounds="[0, 1)")
    max_len: int | None = option(None, "llama: max_position_embeddings (default: --bptt)", bounds=">= 1")
    rope_theta: float | None = option(None, "llama: RoPE base (default 10000)", bounds="> 0")
    act: str | None = option(None, "llama: the MLP gate's activation in down(act(gate(x))*up(x)): silu (SwiGLU), "
                             "relu (exact zeros where gate(x) < 0: a naturally sparse model) or gelu (default silu)")
    attention: str | None = option(None, "llama: the attention variant (saved in the checkpoint): softmax "
                                   "(vanilla), softmax1 (off-by-one: a zero logit joined to each row), sink-logit (a "
                                   "learned logit per head, gpt-oss), gated (a sigmoid gate per head on the output, "
                                   "Qwen), sink-token (a new vocabulary entry prepended to every sample, "
                                   "StreamingLLM's learnable sink) or relu (relu(x)/n, no softmax: Guo et al.'s "
                                   "intervention); default softmax")
    optimizer: str = option("sgd", "sgd, adam or adamw")
    lr: float = option(5.0, "learning rate", bounds="> 0")
    weight_decay: float = option(0.0, "weight decay (decoupled for adamw; Gu et al.: larger values encourage sinks)",
                                 bounds=">= 0")
    group_lr: tuple[str, ...] = option((), "learning rate for parameters whose name matches GLOB (repeatable)",
                                       metavar="GLOB=LR", repeat=True)
    clip: float = option(0.5, "max gradient norm (0: off)", bounds=">= 0")
    batching: str = option("bptt", "bptt (the tutorial's parallel streams) or random windows")
    batch_size: int = option(20, "parallel streams (bptt) or windows (random)", bounds=">= 1")
    bptt: int = option(35, "sequence length", bounds=">= 1")
    steps: int = option(1500, "optimiser steps", bounds=">= 0")
    track_every: int = option(100, "steps between tracked lines (loss, attention entropy, sinks)", bounds=">= 1")
    eval_every: int = option(500, "steps between validation losses", bounds=">= 1")
    snapshot_steps: tuple[int, ...] = option((), "comma-separated steps to keep attention maps at", bounds=">= 0")
    checkpoint_every: int = option(500, "steps between checkpoints (what --resume continues from)", bounds=">= 1")
    seed: int = option(0, "seed of the initialisation, the batches and dropout")

    def __post_init__(self):
        for key, value, choices in (("act", self.act, ACTS), ("attention", self.attention, VARIANTS)):
            if value is not None and value not in choices:
                raise UsageError(f"{_flag(key)} {value}: invalid choice: {value!r}; {did_you_mean(value, choices)}"
                                 f"choose one of {', '.join(choices)}")
        self._check_model()

    def _check_model(self) -> None:
        """--model and the architecture flags agree, before anything is read or built."""
        if self.model in MODEL_DEFAULTS:
            if self.model == "tutorial" and (extra := [_flag(k) for k in LLAMA_ONLY if getattr(self, k) is not None]):
                why = "; the tutorial's feed-forward is always an ungated ReLU" if self.act is not None else ""
                verb, them = ("applies", "it") if len(extra) == 1 else ("apply", "them")
                raise UsageError(f"{', '.join(extra)} {verb} to --model llama only (add --model llama or leave "
                                 f"{them} out{why})")
            return
        if not (Path(self.model).expanduser() / "config.json").is_file():
            raise UsageError(f"--model {self.model}: use tutorial, llama or a Hugging Face model folder (one with "
                             "config.json, e.g. the model/ folder of an attnlab train run)")
        if given := [_flag(k) for k in ARCH_FLAGS if getattr(self, k) is not None]:
            raise UsageError(f"{', '.join(given)} shape a new model; --model {self.model} is loaded as it is")

    def arch(self) -> dict:
        """The new model's architecture: each flag given, else --model's default (None where it has none)."""
        return {k: v if (v := getattr(self, k)) is not None else MODEL_DEFAULTS[self.model].get(k) for k in ARCH_FLAGS}

    def trainer_config(self):
        """The trainer's config (imports PyTorch: called once the run starts); a bad optimiser or batching is
        refused here, naming its flag."""
        from attnlab.train.trainer import TrainConfig

        return TrainConfig(optimizer=self.optimizer, lr=self.lr, group_lrs=self.group_lr, clip=self.clip,
                           weight_decay=self.weight_decay, batching=self.batching, batch_size=self.batch_size,
                           bptt=self.bptt, steps=self.steps, track_every=self.track_every,
                           eval_every=self.eval_every, snapshot_steps=self.snapshot_steps,
                           checkpoint_every=self.checkpoint_every, seed=self.seed)
