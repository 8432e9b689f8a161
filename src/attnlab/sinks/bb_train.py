"""Train a small Llama on the Bigram-Backcopy task and watch its extreme tokens form (Guo et al. 2024).

Every ``track_every`` steps, on one fixed probe batch, per layer (each has one head, as in the paper):

- ``dormant``: attention to the first token (BOS; a sink-token model's sink token) from non-trigger queries
  (positions >= 1): the sink, where the head has no work; ``active``: the same from trigger queries, where it
  copies; ``copy``: their attention to the token before them (the backcopy itself); ``copy_share``: that
  attention over the row's whole attention mass, the same number where rows sum to 1 (softmax, gated, a sink
  token) and the comparable one where they need not (ReLU attention: relu(x)/n; softmax1 and a sink logit:
  < 1), a row with no mass counting 0;
- ``logit_gap``: the first token's attention logit minus the mean logit of the other keys, over non-trigger
  queries (the softmax's normaliser cancels, so it is read from the probabilities: log p_0 - mean_j log p_j);
- ``value_ratio``: the first token's value-state norm over the median of the others' (the drain: < 1);
- ``resid_ratio``: the first token's residual-stream norm after the layer over the median of the others'
  (the residual-state peak: > 1);

and the probe batch's loss beside the task's Bayes floor (:func:`attnlab.sinks.backcopy.bayes_nll`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import position_norm_ratio
from attnlab.models import arch
from attnlab.models.causal_lm import CausalLM, LlamaLMConfig, build_llama
from attnlab.sinks.backcopy import BBTask, bayes_nll, sample
from attnlab.train.batching import prepend

OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class BBRun:
    """One model's run: what it was, its trajectory (one dict per tracked step) and the model at the end."""

    name: str
    layers: int
    variant: str
    optimizer: str
    track: list[dict]
    model: CausalLM


def build(task: BBTask, cfg, layers: int, variant: str) -> CausalLM:
    """The BB model: one head per layer (the paper's), the task's vocabulary, trained at ``cfg.length``."""
    torch.manual_seed(cfg.seed)
    vocab = task.vocab_size + (variant == "sink-token")  # a sink-token model's sink is an entry of its own
    return build_llama(LlamaLMConfig(vocab, cfg.d_model, layers, 1, 1, cfg.d_ffn, cfg.length + 1, attention=variant,
                                     sink_token_id=task.vocab_size if variant == "sink-token" else None))


def _optimizer(model: CausalLM, cfg, name: str, lr: float | None = None) -> torch.optim.Optimizer:
    """AdamW at ``lr`` (default ``cfg.lr``), or SGD at ``lr``: SGD's rate is swept, so it has no default."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}")
    if name == "sgd":  # the paper's SGD run: momentum 0.9
        if lr is None:
            raise ConfigError("the SGD optimizer needs its learning rate (lr=...)")
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr if lr is None else lr, weight_decay=cfg.weight_decay,
                             betas=(0.9, 0.99))


def _with_sink(model: CausalLM, x: torch.Tensor) -> torch.Tensor:
    """A sink-token model sees its sink in front of BOS (as StreamingLLM's learnable sink); others x itself."""
    sink = model.sink_token_id
    return x if sink is None else prepend(x, sink)


def nll(model: CausalLM, x: torch.Tensor) -> torch.Tensor:
    """(B, L-1) next-token loss on x (B, L), BOS predicting the first token included (not the sink's)."""
    inp = _with_sink(model, x)
    logits, _ = model(inp, attentions=False)
    logits = logits[:, inp.shape[1] - x.shape[1]:-1]  # (B, L-1, V)
    return F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")


@torch.no_grad()
def measure(model: CausalLM, task: BBTask, x: torch.Tensor) -> dict:
    """The probe: loss, Bayes floor and, per layer, the extreme-token measurements (module docstring)."""
    model.eval()
    inp = _with_sink(model, x)
    off = inp.shape[1] - x.shape[1]  # where BOS sits: 1 behind a sink token
    relu = getattr(model.hf.config, "attention_variant", "softmax") == "relu"
    values, resids = [], []
    hooks = [arch.attention(model.hf, i).v.register_forward_hook(lambda m, a, out: values.append(out))
             for i in range(len(arch.layers(model.hf)))]
    hooks += [layer.register_forward_hook(lambda m, a, out: resids.append(out[0] if isinstance(out, tuple) else out))
              for layer in arch.layers(model.hf)]
    try:
        logits, maps = model(inp, attentions=True)
    finally:
        for h in hooks:
            h.remove()
    loss = F.cross_entropy(logits[:, off:-1].transpose(1, 2), x[:, 1:]).item()
    trig = task.is_trigger(x).to(x.device)
    trig[:, 0] = False
    rest = ~trig
    rest[:, 0] = False  # BOS's own query sees only itself
    layers = []
    for a, v, h in zip(maps, values, resids):
        a = a[:, 0].float()  # (B, S, S): the one head; position 0 is BOS (a sink-token model's sink token)
        first = a[:, off:, 0]  # (B, L): each query's attention to the first token
        prev = a.diagonal(-1, -2, -1)[:, off:]  # (B, L-1): query t's attention to t-1 (queries 1..L-1 of x)
        mass = a[:, off + 1:].sum(-1)  # (B, L-1): the same queries' whole attention mass
        share = prev / mass.clamp_min(1e-30)  # (B, L-1): 0 where a ReLU row has no mass (prev is 0 there too)
        logp = a[:, off:].clamp_min(1e-30).log()  # (B, L, S)
        keys = torch.ones_like(logp, dtype=torch.bool).tril(off)  # (B, L, S): the keys query t sees...
        keys[..., 0] = False  # ...but the first
        gap = logp[..., 0] - (logp * keys).sum(-1) / keys.sum(-1).clamp_min(1)  # (B, L)
        layers.append({"dormant": float(first[rest].mean()), "active": float(first[trig].mean()),
                       "copy": float(prev[trig[:, 1:]].mean()), "copy_share": float(share[trig[:, 1:]].mean()),
                       "logit_gap": None if relu else float(gap[rest].mean()),  # relu has no logits to read back
                       "value_ratio": float(position_norm_ratio(v, "median")),
                       "resid_ratio": float(position_norm_ratio(h, "median"))})
    model.train()
    return {"loss": loss, "bayes": float(bayes_nll(task, x.cpu()).mean()), "layers": layers}


def train_bb(task: BBTask, cfg, name: str, layers: int, variant: str = "softmax", optimizer: str = "adam",
             device: str = "cpu", progress=None, steps: int | None = None, lr: float | None = None) -> BBRun:
    """Train one BB model for ``steps`` (default ``cfg.steps``) steps of fresh batches (seeded) at ``lr`` (Adam's
    default ``cfg.lr``; SGD needs one), measuring every ``cfg.track_every``."""
    model = build(task, cfg, layers, variant).to(device)
    probe = sample(task, cfg.probe_batch, cfg.length, torch.Generator().manual_seed(cfg.seed + 2)).to(device)
    track = fit(model, task, cfg, lambda g: sample(task, cfg.batch, cfg.length, g), probe,
                cfg.steps if steps is None else steps, optimizer, progress, lr)
    return BBRun(name, layers, variant, optimizer, track, model)


def fit(model: CausalLM, task: BBTask, cfg, batches, probe: torch.Tensor, steps: int, optimizer: str = "adam",
        progress=None, lr: float | None = None) -> list[dict]:
    """``steps`` steps on ``batches(generator)`` (B, L) from a seeded generator, :func:`measure` on ``probe`` every
    ``cfg.track_every`` steps and at the end: the track."""
    device = next(model.parameters()).device
    opt = _optimizer(model, cfg, optimizer, lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    track = []
    model.train()
    for step in range(steps + 1):
        if step % cfg.track_every == 0 or step == steps:
            track.append({"step": step, **measure(model, task, probe)})
        if step == steps:
            break
        loss = nll(model, batches(gen).to(device)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress is not None:
            progress.update(1)
    model.eval()
    return track


def text_windows(task: BBTask, ids: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """(batch, length) windows of a text's symbol ids (N,) at random offsets, each after a BOS: the BB model's
    vocabulary on natural text."""
    starts = torch.randint(0, ids.numel() - length, (batch,), generator=gen)
    x = torch.stack([ids[s:s + length - 1] for s in starts.tolist()])  # (B, L-1)
    return torch.cat([x.new_full((batch, 1), task.bos), x], 1)


def encode(task: BBTask, text: str) -> torch.Tensor:
    """(N,) symbol ids of ``text`` (every character must be one of the task's symbols)."""
    index = {c: i for i, c in enumerate(task.symbols)}
    return torch.tensor([index[c] for c in text])
