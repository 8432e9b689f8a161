"""Train a language model while tracking its attention; checkpoint and resume exactly.

The model is any module with ``forward(x (B, T), attentions: bool) -> (logits (B, T, V),
[attention (B, H, T, T) per layer])``; it may return no maps when ``attentions`` is False (a
Hugging Face model then keeps its fast fused attention for the training steps). Every
``track_every`` steps one line goes to ``metrics.jsonl``: training loss (mean since the last
line), per-layer and per-head attention entropy (:func:`attnlab.core.metrics.attention_entropy`,
averaged over batch and query rows), the share of attention on the first token
(:func:`attnlab.core.metrics.sink_share`, averaged over all rows), and, every ``eval_every``
steps, validation loss. Minibatches come from the batcher named by ``batching``
(:mod:`attnlab.train.batching`).
Attention is always measured on one fixed probe minibatch (the first training batch) with
dropout off, so its curve compares like with like; the probe's first sequence's maps are
kept at ``snapshot_steps``.

Resume: ``checkpoint.pt`` holds the model, the optimiser, the step and every RNG state (dropout
draws from torch's global generator; random windows from their own), so a run killed after a
checkpoint and resumed writes the same metrics as one that never stopped. It holds data only
(tensors, dicts, lists, numbers, strings) and is read with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import fnmatch
import io
import json
import pickle
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from attnlab.core.errors import ConfigError, UsageError
from attnlab.core.io import write_atomic
from attnlab.core.metrics import attention_entropy, sink_importance, sink_rate, sink_share
from attnlab.experiments.config import check_fields
from attnlab.train.batching import BATCHERS, PrependSink, make_batcher

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
# what checkpoint.pt holds; torch.load(weights_only=True) reads it: tensors, dicts, lists, numbers, strings
CHECKPOINT_KEYS = ("model", "optimizer", "step", "loss_acc", "torch_rng", "window_rng", "config", "snapshots")


@dataclass(frozen=True)
class TrainConfig:
    optimizer: str = "sgd"
    lr: float = 5.0
    # per-parameter-group learning rates, "glob=lr" on parameter names; Scan&Snap Fig. 7 uses
    # lr 10 for the layer-0 FFN and 5 elsewhere: ("layers.0.linear*=10",)
    group_lrs: tuple[str, ...] = ()
    clip: float = 0.5  # max gradient norm; 0 disables
    weight_decay: float = 0.0  # L2 (sgd, adam) or decoupled (adamw); Gu et al.: sinks grow with it
    batching: str = "bptt"  # a name in attnlab.train.batching.BATCHERS
    batch_size: int = 20  # parallel streams (bptt) or windows (random)
    bptt: int = 35  # sequence length
    steps: int = 1500
    track_every: int = 100
    eval_every: int = 500
    eval_batches: int = 50  # validation minibatches per evaluation (0: the whole split)
    snapshot_steps: tuple[int, ...] = ()
    checkpoint_every: int = 500
    seed: int = 0

    def __post_init__(self):
        check_fields(self)  # NaN and infinity first: a NaN clip or weight decay passes every comparison below
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer={self.optimizer!r}: use one of {', '.join(OPTIMIZERS)}")
        if self.batching not in BATCHERS:
            raise ConfigError(BATCHERS.unknown(self.batching))
        if not self.lr > 0 or self.clip < 0 or self.weight_decay < 0:
            raise ConfigError(f"lr={self.lr}, clip={self.clip}, weight_decay={self.weight_decay}: need lr > 0, "
                              "clip >= 0 and weight_decay >= 0")
        for name in ("batch_size", "bptt", "track_every", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)}: use at least 1")
        if self.steps < 0 or self.eval_batches < 0:
            raise ConfigError("steps and eval_batches must be >= 0")
        parse_group_lrs(self.group_lrs)


def parse_group_lrs(specs: tuple[str, ...]) -> list[tuple[str, float]]:
    out = []
    for spec in specs:
        pattern, sep, value = spec.rpartition("=")
        try:
            lr = float(value)
        except ValueError:
            lr = float("nan")
        if not sep or not pattern or not lr > 0:
            raise ConfigError(f"group_lrs entry {spec!r}: write PARAM_GLOB=LR with LR > 0, e.g. layers.0.linear*=10")
        out.append((pattern, lr))
    return out


def param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict]:
    """One group per learning rate; the first matching glob wins, the rest get ``cfg.lr``."""
    rules = parse_group_lrs(cfg.group_lrs)
    groups: dict[float, list] = {}
    matched = set()
    for name, p in model.named_parameters():
        lr = cfg.lr
        for i, (pattern, rule_lr) in enumerate(rules):
            if fnmatch.fnmatchcase(name, pattern):
                lr = rule_lr
                matched.add(i)
                break
        groups.setdefault(lr, []).append(p)
    if unused := [rules[i][0] for i in range(len(rules)) if i not in matched]:
        raise ConfigError(f"group_lrs pattern(s) {unused} match no parameter; names look like "
                          f"{next(iter(dict(model.named_parameters())))!r}")
    return [{"params": ps, "lr": lr, "weight_decay": cfg.weight_decay} for lr, ps in groups.items()]


def attention_stats(maps: list[torch.Tensor]) -> dict:
    """Per layer: entropy per head (mean over batch and query rows) and sink share (mean over all rows);
    over all heads: Gu et al.'s sink rate Sink_k^0.3 for k = 0..9, and the largest head's importance_0
    (its mean attention to token 0: the head closest to becoming a sink, before any crosses 0.3)."""
    entropy = [attention_entropy(a).mean((0, 2)).tolist() for a in maps]  # a: (B, H, T, T) -> (H,)
    first = [float(sink_share(a).mean()) for a in maps]  # (B, H, T) -> one number
    strongest = max(float(sink_importance(a, 1).max()) for a in maps)
    return {"entropy": entropy, "first_token_share": first, "sink_rate": sink_rate(maps),
            "sink_importance_max": strongest}


class Trainer:
    def __init__(self, model: nn.Module, train_ids: torch.Tensor, valid_ids: torch.Tensor | None,
                 cfg: TrainConfig, run_dir: str | Path, device: str = "cpu"):
        self.model, self.cfg, self.device = model.to(device), cfg, device
        self.run_dir = Path(run_dir)
        self.batcher = make_batcher(cfg.batching, cfg.batch_size, cfg.bptt)
        if (sink := getattr(model, "sink_token_id", None)) is not None:  # every sample starts with the sink token
            self.batcher = PrependSink(self.batcher, sink)
        self.train_src = self.batcher.prepare(train_ids, "training")
        self.valid_src = None if valid_ids is None else self.batcher.prepare(valid_ids, "validation")
        self.opt = OPTIMIZERS[cfg.optimizer](param_groups(model, cfg))
        self.gen = torch.Generator().manual_seed(cfg.seed)  # random windows
        self.step = 0
        self.loss_acc = [0.0, 0]  # training-loss sum and count since the last metrics line
        self.snapshots: dict[int, list[torch.Tensor]] = {}
        self.checkpoint_step: int | None = None  # the step of the run's checkpoint.pt, once there is one

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean next-token cross-entropy on the validation split (dropout off)."""
        self.model.eval()
        total, count = 0.0, 0
        for x, y in self.batcher.eval_batches(self.valid_src, self.cfg.eval_batches):  # each (B, T)
            logits, _ = self.model(x.to(self.device), attentions=False)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.to(self.device).flatten(), reduction="sum")
            total += loss.item()
            count += y.numel()
        self.model.train()
        return total / count

    # ------------------------------------------------------------------ checkpoints
    def _config_json(self) -> dict:
        """What a checkpoint must match to be resumed; ``steps`` may grow, to extend a run."""
        train = {k: v for k, v in asdict(self.cfg).items() if k != "steps"}
        return {"train": train, "model": repr(getattr(self.model, "cfg", type(self.model).__name__))}

    def save_checkpoint(self) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": self.step,
                 "loss_acc": self.loss_acc, "torch_rng": torch.get_rng_state(), "window_rng": self.gen.get_state(),
                 "config": self._config_json(), "snapshots": self.snapshots}
        buf = io.BytesIO()
        torch.save(state, buf)
        write_atomic(self.run_dir / "checkpoint.pt", buf.getvalue())  # a kill never leaves half a checkpoint
        self.checkpoint_step = self.step

    def load_checkpoint(self) -> None:
        """Restore model, optimiser, step and RNG states; cut metrics.jsonl back to the checkpoint's step."""
        state = self._read_checkpoint()
        path = self.run_dir / "checkpoint.pt"
        if state["config"] != self._config_json():
            raise UsageError(f"{path} was written by a different config; resume with the same settings "
                             "or start a new run folder")
        kept = self._metrics_lines(upto=state["step"])
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        self.gen.set_state(state["window_rng"])
        self.step, self.snapshots, self.loss_acc = state["step"], state["snapshots"], list(state["loss_acc"])
        self.checkpoint_step = self.step
        # drop metric lines written after the checkpoint: the resumed run writes them again
        write_atomic(self.run_dir / "metrics.jsonl", "".join(line + "\n" for line in kept))

    def _read_checkpoint(self) -> dict:
        """checkpoint.pt as a dict; a missing, truncated or foreign file is one UsageError line."""
        path = self.run_dir / "checkpoint.pt"
        if not path.is_file():
            raise UsageError(f"{self.run_dir}: no checkpoint.pt to resume from; start without --resume")
        try:
            state = torch.load(path, weights_only=True)  # data only: loading runs no pickled code
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, KeyError, ValueError) as e:  # torn or foreign
            raise UsageError(f"{path} is truncated, damaged or not written by attnlab train ({type(e).__name__}); "
                             "restore it from a copy, or start a new run folder without --resume") from None
        missing = [k for k in CHECKPOINT_KEYS if k not in state] if isinstance(state, dict) else CHECKPOINT_KEYS
        if missing:
            raise UsageError(f"{path} is not an attnlab train checkpoint (no {', '.join(missing)}); "
                             "start a new run folder without --resume")
        return state

    def _metrics_lines(self, upto: int) -> list[str]:
        """metrics.jsonl's lines up to step ``upto``. A torn last line (a kill during an append leaves
        one) is dropped with a note; a damaged earlier line is a UsageError."""
        path = self.run_dir / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        kept = []
        for n, line in enumerate(lines, 1):
            try:
                step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):
                if n < len(lines):
                    raise UsageError(f"{path}: line {n} is not a metrics line; delete it (and the lines after it) "
                                     "or start a new run folder") from None
                print(f"attnlab train: {path}: dropped a torn last line (left by a run killed while writing it)",
                      file=sys.stderr)
                break
            if step <= upto:
                kept.append(line)
        return kept

    # ------------------------------------------------------------------ the loop
    def fit(self, resume: bool = False, show_progress: bool = True,
            on_step: Callable[[int], None] | None = None, desc: str = "train") -> list[dict]:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            self.load_checkpoint()
        else:
            torch.manual_seed(cfg.seed)  # dropout draws
            (self.run_dir / "metrics.jsonl").write_text("")
            stats, maps = self._probe()
            if 0 in self.cfg.snapshot_steps:
                self.snapshots[0] = [a[0].cpu() for a in maps]
            self._log(self._record(stats, None))
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=self.step, desc=desc, disable=None if show_progress else True,
                   leave=False, unit="step")
        self.model.train()
        tokens, t0 = 0, time.perf_counter()
        snap = set(cfg.snapshot_steps)
        while self.step < cfg.steps:
            x, y = self.batcher.batch(self.train_src, self.step, self.gen)  # each (B, T)
            x, y = x.to(self.device), y.to(self.device)
            logits, _ = self.model(x, attentions=False)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.clip:
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip)
            self.opt.step()
            self.step += 1
            self.loss_acc = [self.loss_acc[0] + loss.item(), self.loss_acc[1] + 1]
            tokens += y.numel()
            tracked = self.step % cfg.track_every == 0 or self.step == cfg.steps
            if tracked or self.step in snap:
                stats, probe_maps = self._probe()
                if self.step in snap:
                    self.snapshots[self.step] = [a[0].cpu() for a in probe_maps]  # (H, T, T) per layer
            if tracked:
                line = self._record(stats, self.loss_acc[0] / self.loss_acc[1])
                self._log(line)
                self.loss_acc = [0.0, 0]
                bar.set_postfix(loss=f"{line['train_loss']:.3f}", tok_s=f"{tokens / (time.perf_counter() - t0):.0f}")
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                self.save_checkpoint()
            bar.update()
            if on_step:
                on_step(self.step)
        bar.close()
        return [json.loads(line) for line in (self.run_dir / "metrics.jsonl").read_text().splitlines()]

    @torch.no_grad()
    def _probe(self) -> tuple[dict, list[torch.Tensor]]:
        """Attention statistics on one fixed minibatch (the first training batch), dropout off, so
        every step is measured on the same tokens the same way. -> (stats, maps)."""
        if not hasattr(self, "_probe_x"):
            self._probe_x = self.batcher.probe(self.train_src).to(self.device)  # (B', T)
        was_training = self.model.training
        self.model.eval()
        _, maps = self.model(self._probe_x, attentions=True)
        stats = attention_stats(maps)
        if hasattr(self.model, "probe_stats"):  # what a model measures beyond its maps (hidden-state norms)
            stats.update(self.model.probe_stats(self._probe_x))
        self.model.train(was_training)
        return stats, maps

    def _record(self, stats: dict, train_loss: float | None) -> dict:
        line = {"step": self.step, "train_loss": train_loss, **stats}
        if self.valid_src is not None and (self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps):
            line["valid_loss"] = self.evaluate()
        return line

    def _log(self, line: dict) -> None:
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
