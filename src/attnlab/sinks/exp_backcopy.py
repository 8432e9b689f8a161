"""``sink-backcopy``: attention sinks where they provably emerge, on the Bigram-Backcopy task (Guo et al. 2024).

A one-layer, one-head Llama (and a three-layer one) trained on BB sequences (:mod:`attnlab.sinks.backcopy`)
grows the three extreme-token phenomena: its head is *active* on triggers (it attends to the token before to
copy it) and *dormant* elsewhere, parking its attention on BOS (the sink); BOS's value state shrinks (the
drain) and, deeper in, its residual norm grows (the peak). Then the interventions, each a 1-layer run of the
same setup: ReLU attention, SGD instead of Adam (over a swept learning rate), and the softmax variants (softmax1,
a learned sink logit, gated attention, a sink token), each judged on the sink, the drain and the peak only where
its model learned the task (:mod:`attnlab.sinks.interventions`); and StreamingLLM's table on the model that has a
sink: streamed through caches 0+W, 1+(W-1), 4+(W-4) with rolling positions, does evicting the sink hurt?

The claims' thresholds are fields of the config, fixed before the first run. The setup departs from the
paper's on purpose: a Llama (RoPE, RMSNorm, SwiGLU: the lab's model, so the evicting cache can stream it)
where the paper has learned positions and LayerNorm, and sequences of 32 with batches of 64 where it has 256
and 512: a CPU's budget. Why that matters is measured, not assumed: the sink forms *after* the copy is
learned, in a second phase whose length the report gives (the step the dormant attention first reaches the
sink threshold).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import spearmanr

from attnlab.core.errors import ConfigError
from attnlab.core.metrics import sink_rate
from attnlab.core.workers import in_processes
from attnlab.data.sources import read_corpus
from attnlab.experiments.claims import check, finding
from attnlab.experiments.registry import Result, register
from attnlab.sinks.backcopy import from_text, sample
from attnlab.sinks.bb_train import build, encode, fit, text_windows, train_bb
from attnlab.sinks.interventions import best_rate, intervention_claims, sgd_name, summaries, sweep_rows, sweep_table
from attnlab.sinks.plots import backcopy_figure, backcopy_maps
from attnlab.sinks.premises import needs_a_sink, sink_verdict
from attnlab.sinks.table import label, sink_table

TALK_ORDER = 1  # after sink-pretraining (its own "experiments" module), before sink-emergence (by name)
INTERVENTIONS = {"relu": ("relu", "adam"), "sgd": ("softmax", "sgd"), "softmax1": ("softmax1", "adam"),
                 "sink-logit": ("sink-logit", "adam"), "gated": ("gated", "adam"), "sink-token": ("sink-token", "adam")}


@dataclass(frozen=True)
class BackcopyConfig:
    text: str = "tinyshakespeare"  # the bigram chain's characters (the paper's: Tiny Shakespeare, 65 symbols)
    k: int = 3  # triggers: the k most frequent characters
    length: int = 32  # training sequences, BOS included
    d_model: int = 128  # one head per layer: head dimension d_model
    d_ffn: int = 512
    batch: int = 64
    steps: int = 2500
    main_steps: int = 6000  # the 1-layer softmax model trains on: the stable phase after the sink forms
    text_steps: int = 1000  # then a copy of it trains on the text itself (its characters; 0: not)
    lr: float = 3e-3  # AdamW, betas (0.9, 0.99), as the paper's
    sgd_lrs: tuple[float, ...] = (0.03, 0.1, 0.2)  # SGD (momentum 0.9) swept: the paper's 0.03 and above (a pilot:
    # 0.1 learned most, 0.3 and 1 diverged)
    weight_decay: float = 1e-4
    track_every: int = 50
    probe_batch: int = 128
    deep_layers: int = 3  # the model whose residual peak is checked (0: none)
    interventions: tuple[str, ...] = tuple(INTERVENTIONS)
    window: int = 16  # the streaming caches' W (below the trained length: rolling positions stay known)
    stream_tokens: int = 512
    workers: int = 2
    seed: int = 0
    # the claims, fixed before the first run (the thresholds)
    sink_min: float = 0.5  # a dormant head's attention to BOS at the end
    active_max: float = 0.2  # trigger queries' attention to BOS at the end
    drain_max: float = 0.5  # BOS value norm / the others' median
    peak_min: float = 2.0  # BOS residual norm / the others' median (deep model, some layer)
    removed_max: float = 0.2  # an intervention removes the sink: its dormant attention to BOS at most this
    competent_min: float = 0.9  # a run learned the task: its trigger queries' copy share at least this
    fall_max: float = 0.5  # the value ratio at the end / its peak during training
    reinforce_max: float = -0.7  # Spearman(logit gap, value ratio) over training after the copy is learned
    trend_min: float = 0.8  # |Spearman| of the logit gap (rising) and the value ratio (falling) with the step,
    # over the tracked steps after the sink forms
    evict_raise: float = 0.25  # loss of 0+W over 1+(W-1), minus 1
    one_sink_tol: float = 0.05  # 1+(W-1) within this of 4+(W-4)
    checked: bool = True  # False (the quick mode): a sink its few steps do not grow is unresolved, not failed

    def __post_init__(self):
        if self.length < 3:
            raise ConfigError(f"length={self.length}: a BB sequence needs at least 3 tokens (BOS, a token, the next)")
        if not 4 < self.window < self.length:
            raise ConfigError(f"window={self.window}: give 4 < window < length={self.length} (the caches hold 4 "
                              "sinks at most, and rolling positions must stay inside the trained length)")
        if self.stream_tokens <= 2 * self.window:
            raise ConfigError(f"stream_tokens={self.stream_tokens}: give more than 2 x window={self.window}")
        if unknown := [i for i in self.interventions if i not in INTERVENTIONS]:
            raise ConfigError(f"interventions {unknown}: use some of {', '.join(INTERVENTIONS)}")
        if "sgd" in self.interventions and (not self.sgd_lrs or min(self.sgd_lrs) <= 0):
            raise ConfigError(f"sgd_lrs={','.join(map(str, self.sgd_lrs))}: give one or more SGD rates, each > 0")
        if min(self.steps, self.track_every, self.batch, self.probe_batch, self.workers) < 1 or self.deep_layers < 0:
            raise ConfigError("steps, track_every, batch, probe_batch and workers must be >= 1, deep_layers >= 0")


def _job(task, cfg, name: str, layers: int, variant: str, optimizer: str, lr: float | None):
    steps = max(cfg.steps, cfg.main_steps) if name == "1-layer" else cfg.steps
    run = train_bb(task, cfg, name, layers, variant, optimizer, steps=steps, lr=lr)
    return run.track, {k: v.cpu() for k, v in run.model.state_dict().items()}


def _runs(cfg: BackcopyConfig) -> dict[str, tuple[int, str, str, float | None]]:
    """name -> (layers, variant, optimizer, its rate: None for Adam's cfg.lr); SGD once per swept rate."""
    runs = {"1-layer": (1, "softmax", "adam", None)}
    if cfg.deep_layers:
        runs[f"{cfg.deep_layers}-layer"] = (cfg.deep_layers, "softmax", "adam", None)
    for name in cfg.interventions:
        variant, optimizer = INTERVENTIONS[name]
        if optimizer == "sgd":
            runs |= {sgd_name(lr): (1, variant, optimizer, lr) for lr in cfg.sgd_lrs}
        else:
            runs[name] = (1, variant, optimizer, None)
    return runs


def _first(track: list[dict], key, threshold: float) -> int | None:
    """The first tracked step where ``key`` reaches ``threshold`` (None: none does)."""
    return next((t["step"] for t in track if key(t) >= threshold), None)


@register("sink-backcopy", "Sinks where they provably emerge: 1- and 3-layer Llamas trained on Bigram-Backcopy; "
          "active vs dormant attention, value drain, residual peak over training; ReLU, SGD and the softmax "
          "variants; StreamingLLM's table on a model that has a sink.", BackcopyConfig,
          quick={"length": 24, "d_model": 96, "d_ffn": 384, "lr": 6e-3, "steps": 2400, "track_every": 50,
                 "main_steps": 2400, "text_steps": 0, "deep_layers": 0, "interventions": ("relu",), "window": 12,
                 "stream_tokens": 256, "checked": False})
# quick: 2400 steps, 2x the step its sink formed on one CPU (1150; 650 on another; where none forms, the claims are
# unresolved, not failed); ReLU as long, so its claims compare with a control that has its sink; SGD (unresolved
# here) left to the full run
def run_backcopy(cfg: BackcopyConfig, ctx) -> Result:
    text = "\n".join(read_corpus(cfg.text, "text", "--set text=PATH"))
    task = from_text(text, cfg.k)
    jobs = {name: (task, cfg, name, *spec) for name, spec in _runs(cfg).items()}
    with ctx.progress(len(jobs), f"BB training runs ({min(cfg.workers, len(jobs))} at once)") as bar:
        done = in_processes(_job, jobs, cfg.workers, bar)
    tracks = {name: track for name, (track, _) in done.items()}
    sweep = sweep_rows(tracks, cfg.sgd_lrs, cfg.competent_min) if "sgd" in cfg.interventions else []
    sgd_lr = best_rate(sweep)["lr"] if sweep else None
    sweep = [r | {"decides": r["lr"] == sgd_lr} for r in sweep]
    main = build(task, cfg, 1, "softmax")
    main.load_state_dict(done["1-layer"][1])
    main.eval()
    stream = sample(task, 1, cfg.stream_tokens, torch.Generator().manual_seed(cfg.seed + 3))[0]
    with ctx.progress(3 * cfg.stream_tokens, "stream through 0/1/4 sinks") as bar:
        nll = sink_table(main.hf, stream, cfg.window, (0, 1, 4), progress=bar)
    table = {n: float(np.mean(v[cfg.window:])) for n, v in nll.items()}  # where the caches differ
    probe = sample(task, cfg.probe_batch, cfg.length, torch.Generator().manual_seed(cfg.seed + 2))
    with torch.no_grad():
        _, maps = main(probe, attentions=True)
    gu = sink_rate(maps, 0.3)[0]
    shown = {n: t for n, t in tracks.items() if not n.startswith("sgd-") or n == sgd_name(sgd_lr)}  # one SGD rate
    ctx.savefig(backcopy_figure(shown, cfg.sink_min), "backcopy_dynamics.png")
    ctx.savefig(backcopy_maps(maps[0][0, 0], probe[0], task), "backcopy_map.png")
    claims = _claims(cfg, tracks, table, sgd_lr) + [finding(f"Gu et al.'s Sink_0^0.3 of the 1-layer model (its one "
                                                            f"head) on {cfg.probe_batch} held-out BB sequences", gu)]
    then_text = _then_text(cfg, task, text, done["1-layer"][1], ctx) if cfg.text_steps else None
    if then_text:
        claims += then_text["findings"]
    metrics = {"task": {"text": cfg.text, "symbols": task.n_symbols, "triggers": [task.symbols[i] for i in
                                                                                  task.triggers.tolist()]},
               "runs": {name: {"layers": spec[0], "variant": spec[1], "optimizer": spec[2],
                               "lr": cfg.lr if spec[3] is None else spec[3], "track": tracks[name]}
                        for name, spec in _runs(cfg).items()},
               "sgd_sweep": sweep, "sgd_lr": sgd_lr, "interventions": summaries(cfg, tracks, sgd_lr),
               "stream": {label(n, cfg.window): loss for n, loss in table.items()}, "sink_rate_0": gu,
               "then_text": None if then_text is None else {k: v for k, v in then_text.items() if k != "findings"}}
    return Result(claims, metrics, _captions(cfg), _summary(cfg, tracks, table, sweep, sgd_lr))


def _then_text(cfg: BackcopyConfig, task, text: str, state: dict, ctx) -> dict:
    """The 1-layer BB model trained on ``text_steps`` of the text's own characters (windows after a BOS): does it
    keep its sink, and does evicting it now hurt? Findings (the issue asks "if that keeps the sink")."""
    model = build(task, cfg, 1, "softmax")
    model.load_state_dict(state)
    ids = encode(task, text)
    cut = round(0.95 * ids.numel())  # the last 5% held out: probe and stream
    train, held = ids[:cut], ids[cut:]
    probe = text_windows(task, held, cfg.probe_batch, cfg.length, torch.Generator().manual_seed(cfg.seed + 4))
    with ctx.progress(cfg.text_steps, "BB model on text") as bar:
        track = fit(model, task, cfg, lambda g: text_windows(task, train, cfg.batch, cfg.length, g), probe,
                    cfg.text_steps, progress=bar)
    stream = torch.cat([torch.tensor([task.bos]), held[:cfg.stream_tokens - 1]])
    nll = sink_table(model.hf, stream, cfg.window, (0, 1, 4))
    table = {n: float(np.mean(v[cfg.window:])) for n, v in nll.items()}
    first, last = track[0]["layers"][0], track[-1]["layers"][0]
    w = cfg.window
    found = [finding(f"BB model then {cfg.text_steps} steps of the text's characters: attention to BOS from "
                     f"non-trigger queries on held-out text (was {first['dormant']:.3f} before; value ratio "
                     f"{last['value_ratio']:.3f})", last["dormant"]),
             finding(f"that model streamed through {label(0, w)} over {label(1, w)}, minus 1 (held-out text, after "
                     f"the first {w} tokens; {label(4, w)}: {table[4]:.4f})", table[0] / table[1] - 1)]
    return {"track": track, "stream": {label(n, w): v for n, v in table.items()}, "findings": found}


def _end(track: list[dict], layer: int = 0) -> dict:
    return track[-1]["layers"][layer]


def _claims(cfg: BackcopyConfig, tracks: dict, table: dict, sgd_lr: float | None) -> list:
    one = tracks["1-layer"]
    end = _end(one)
    sink_step = _first(one, lambda t: t["layers"][0]["dormant"], cfg.sink_min)
    sink = sink_verdict(check(f"a sink emerges: the 1-layer head's attention to BOS from non-trigger queries at step "
                              f"{one[-1]['step']} (dormant; first >= {cfg.sink_min} at step {sink_step})",
                              end["dormant"], cfg.sink_min, 0, "at_least"), None, not cfg.checked,
                        max(cfg.steps, cfg.main_steps))
    out = [check("active on triggers: trigger queries' attention to BOS at the end (they attend to the token before, "
                 f"{end['copy']:.2f})", end["active"], cfg.active_max, 0, "at_most"),
           check("value-state drain: BOS's value norm over the median of the other tokens'", end["value_ratio"],
                 cfg.drain_max, 0, "at_most")]
    if cfg.deep_layers:
        peak = max(layer["resid_ratio"] for layer in tracks[f"{cfg.deep_layers}-layer"][-1]["layers"])
        out.append(check(f"residual-state peak: BOS's residual norm over the others' median, the largest over the "
                         f"{cfg.deep_layers}-layer model's layers", peak, cfg.peak_min, 0, "at_least"))
    out += _dynamics(cfg, one) + intervention_claims(cfg, tracks, sgd_lr)
    w = cfg.window
    out += [check(f"evicting the sink hurts: BB loss through {label(0, w)} over {label(1, w)}, minus 1 (after the "
                  f"first {w} tokens)", table[0] / table[1] - 1, cfg.evict_raise, 0, "at_least"),
            check(f"one sink suffices: {label(1, w)} over {label(4, w)} loss", table[1] / table[4], 1.0,
                  cfg.one_sink_tol, "abs")]
    return [sink] + needs_a_sink(out, sink)  # every other claim is about the sink: none formed, none decided


def _dynamics(cfg: BackcopyConfig, track: list[dict]) -> list:
    """The paper's trajectory shapes: BOS's value norm rises while the bigram and the copy are learned, then
    falls as the sink forms; after the copy is learned the sink logit and the value norm move against each
    other (mutual reinforcement: a larger sink logit makes a smaller BOS value cheaper, and the reverse); once
    the sink has formed, the logit keeps growing and the value keeps draining (the authors' long runs: logit
    9 -> 33 and value 3.5 -> 0.1 from step 1k to 199k). Its rate, logit ~ a + b log t (what the authors' code
    simulates for gradient descent), is reported as a fit, not checked: their theorem's statement was not
    reachable here, and Adam is not gradient descent."""
    steps = np.array([t["step"] for t in track])
    value = np.array([t["layers"][0]["value_ratio"] for t in track])
    gap = np.array([t["layers"][0]["logit_gap"] for t in track])
    peak = int(value.argmax())
    copied = _first(track, lambda t: t["layers"][0]["copy"], 0.5)
    late = [i for i, s in enumerate(steps) if copied is not None and s >= copied]
    rho = float(spearmanr(gap[late], value[late])[0]) if len(late) >= 3 else math.nan
    formed = _first(track, lambda t: t["layers"][0]["dormant"], cfg.sink_min)
    after = steps >= formed if formed is not None else np.zeros_like(steps, dtype=bool)
    n = int(after.sum())
    rise, drain = (float(spearmanr(steps[after], y[after])[0]) if n >= 3 else math.nan for y in (gap, value))
    out = [check(f"the value drain follows a rise: BOS's value ratio at the end over its peak (step {steps[peak]}, "
                 f"{value[peak]:.2f})", float(value[-1] / value[peak]), cfg.fall_max, 0, "at_most"),
           check(f"mutual reinforcement: Spearman correlation of the sink logit gap and the value ratio over the "
                 f"{len(late)} tracked steps from the copy's learning (step {copied})", rho, cfg.reinforce_max, 0,
                 "at_most"),
           check(f"after the sink forms (step {formed}) the sink logit keeps growing: Spearman correlation of the "
                 f"logit gap with the step over {n} tracked steps", rise, cfg.trend_min, 0, "at_least"),
           check(f"after the sink forms the value keeps draining: Spearman correlation of the value ratio with the "
                 f"step over {n} tracked steps", drain, -cfg.trend_min, 0, "at_most")]
    if n >= 3:
        t, y = np.log(steps[after]), gap[after]
        b, a = np.polyfit(t, y, 1)
        r2 = 1 - np.sum((y - (a + b * t)) ** 2) / np.sum((y - y.mean()) ** 2)
        out.append(finding(f"the rate: logit gap = a + b ln(step) fitted after the sink forms: b (R^2 {r2:.2f}, "
                           f"a {a:.1f})", float(b)))
    return out


def _captions(cfg) -> dict[str, str]:
    return {"backcopy_dynamics.png": "Per run over training (1-layer unless named): attention to the first token "
                                     "from non-trigger (dormant, solid) and trigger (active, dashed) queries; the "
                                     "first token's value-state and residual norm over the others' median; the "
                                     f"loss over the Bayes floor. Dotted: the sink threshold {cfg.sink_min}.",
            "backcopy_map.png": "The 1-layer model's attention on one BB sequence at the end (rows: queries; "
                                "triggers marked): the dormant rows on BOS, the trigger rows on the token before."}


def _summary(cfg, tracks: dict, table: dict, sweep: list[dict], sgd_lr: float | None) -> str:
    rows = ["| run | dormant | active | copy | copy share | value ratio | residual ratio (max) | loss - Bayes |",
            "|---|---|---|---|---|---|---|---|"]
    for name, track in tracks.items():
        e, last = _end(track), track[-1]
        rows.append(f"| {name} | {e['dormant']:.3f} | {e['active']:.3f} | {e['copy']:.3f} | {e['copy_share']:.3f} | "
                    f"{e['value_ratio']:.3f} | {max(x['resid_ratio'] for x in last['layers']):.2f} | "
                    f"{last['loss'] - last['bayes']:.4f} |")
    stream = ", ".join(f"{label(n, cfg.window)}: {v:.4f}" for n, v in table.items())
    sgd = f"; SGD, momentum 0.9, lr {', '.join(f'{lr:g}' for lr in cfg.sgd_lrs)}" if sweep else ""
    return (f"BB on {cfg.text}'s characters (k={cfg.k} triggers), sequences of {cfg.length}, {cfg.steps} steps "
            f"(the 1-layer model {max(cfg.steps, cfg.main_steps)}) of "
            f"{cfg.batch} (AdamW lr {cfg.lr:g}{sgd}), d_model {cfg.d_model}, one head per layer. "
            f"Values at the end, first token (BOS):\n\n" + "\n".join(rows) + sweep_table(cfg, sweep, sgd_lr)
            + f"\n\nStreaming BB loss of the 1-layer model, rolling positions, after the first {cfg.window} tokens: "
            f"{stream}.")

