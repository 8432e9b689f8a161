"""Context extension without fine-tuning on a real model: passkey retrieval and long-context
perplexity under PI, NTK-aware, dynamic NTK and YaRN (the seed talk's last part).

``passkey``: the grid lengths × depths × samples for each scaling, accuracy heat-maps.
``rope-zero-shot``: the same grid plus sliding-window perplexity at several context lengths, and
the claims: at 2× the trained window no scaling fails passkey and its perplexity blows up;
NTK / dynamic NTK / YaRN keep passkey and a bounded perplexity; PI untuned is worse than NTK at
short distances. The helpers here are also what ``attnlab passkey`` and ``attnlab longppl`` run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from attnlab.core.errors import ConfigError
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.evals.longppl import LongPPL, long_ppl
from attnlab.evals.passkey import PasskeyCase, PasskeyPrompts, answer_of, check_fits, passkey_cases, retrieve
from attnlab.rope.apply import ScaledRope
from attnlab.core.plotting import plt
from attnlab.rope.scalings import RopeScaling, make_scaling


@dataclass
class PasskeyResult:
    case: PasskeyCase
    answer: int | None
    text: str
    seconds: float

    @property
    def correct(self) -> bool:
        return self.answer == self.case.key


def run_passkey(model, tok, scalings: list[RopeScaling], cases: list[PasskeyCase], ctx
                ) -> dict[str, list[PasskeyResult]]:
    """Every case under every scaling: one prefill per (case, scaling), prompts tokenised once."""
    prompts = PasskeyPrompts(tok)
    check_fits(model.config, max(c.length for c in cases), ctx.device)  # refuse now, not after an hour
    built = {c: prompts.build(c) for c in cases}
    out: dict[str, list[PasskeyResult]] = {}
    with ctx.progress(len(cases) * len(scalings), "passkey") as bar:
        for s in scalings:
            rows = []
            with ScaledRope(model, s):
                for c in cases:
                    t0 = time.perf_counter()
                    text = retrieve(model, tok, built[c])
                    rows.append(PasskeyResult(c, answer_of(text), text, time.perf_counter() - t0))
                    bar.update(1)
            out[s.describe()] = rows
    return out


def accuracy_grid(rows: list[PasskeyResult]) -> tuple[list[int], list[float], np.ndarray]:
    """(lengths, depths, accuracy (n_depths, n_lengths)) over the samples of each cell."""
    lengths = sorted({r.case.length for r in rows})
    depths = sorted({r.case.depth for r in rows})
    acc = np.zeros((len(depths), len(lengths)))
    for i, d in enumerate(depths):
        for j, n in enumerate(lengths):
            cell = [r.correct for r in rows if r.case.depth == d and r.case.length == n]
            acc[i, j] = np.mean(cell)
    return lengths, depths, acc


def accuracy_at(rows: list[PasskeyResult], length: int) -> float:
    return float(np.mean([r.correct for r in rows if r.case.length == length]))


def passkey_metrics(results: dict[str, list[PasskeyResult]]) -> dict:
    return {name: [{"length": r.case.length, "depth": r.case.depth, "sample": r.case.sample, "key": r.case.key,
                    "answer": r.answer, "correct": r.correct, "output": r.text, "seconds": round(r.seconds, 3)}
                   for r in rows] for name, rows in results.items()}


def passkey_figure(ctx, results: dict[str, list[PasskeyResult]], trained: int, name: str = "passkey.png") -> None:
    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results) + 1, 3.2), layout="constrained",
                             squeeze=False)
    for ax, (label, rows) in zip(axes[0], results.items()):
        lengths, depths, acc = accuracy_grid(rows)
        im = ax.imshow(acc, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="lower")
        ax.set_xticks(range(len(lengths)), [f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        for i in range(len(depths)):
            for j in range(len(lengths)):
                ax.text(j, i, f"{acc[i, j]:.0%}", ha="center", va="center", fontsize=7)
        ax.set(xlabel=f"prompt tokens (trained {trained})", title=f"{label}: {np.mean(acc):.0%}")
    axes[0][0].set_ylabel("key depth")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
    ctx.savefig(fig, name)


def run_longppl(model, ids, scalings: list[RopeScaling], lengths: list[int], stride: int, windows: int | None,
                ctx) -> dict[str, LongPPL]:
    check_fits(model.config, max(lengths), ctx.device)
    out = {}
    for s in scalings:
        with ScaledRope(model, s), ctx.progress((windows or 0) * len(lengths), f"longppl {s.describe()}") as bar:
            out[s.describe()] = long_ppl(model, ids, lengths, stride, windows, progress=bar)
    return out


def longppl_figure(ctx, curves: dict[str, LongPPL], trained: int, name: str = "longppl.png") -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    for label, r in curves.items():
        ax.plot(r.lengths, [r.ppl(n) for n in r.lengths], "o-", label=label)
    ax.axvline(trained, color="k", ls=":", lw=1, label=f"trained context {trained}")
    ax.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="PPL (last 256 tokens of each window)",
           title="long-context perplexity")
    lengths = next(iter(curves.values())).lengths
    ax.minorticks_off()  # the log axis' own labels would overprint the lengths
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.legend(fontsize=7)
    ctx.savefig(fig, name)


def load_scalings(names, factor: float) -> list[RopeScaling]:
    return [make_scaling(n, 1.0 if n == "none" else factor) for n in names]


@dataclass(frozen=True)
class PasskeyConfig:
    model: str = "smollm2"
    scalings: tuple[str, ...] = ("none", "pi", "ntk", "dynamic-ntk", "yarn")
    factor: float = 2.0  # target context / trained context: 16k for SmolLM2's 8k
    lengths: tuple[int, ...] = (4096, 8192, 16384)
    depths: tuple[float, ...] = (0.0, 0.5, 1.0)
    samples: int = 2
    seed: int = 0
    min_accuracy: float = 0.8  # "keeps passkey": accuracy at the longest length
    max_accuracy_unscaled: float = 0.2  # "fails passkey": accuracy of no scaling at the longest length

    def __post_init__(self):
        if self.samples < 1 or not self.lengths or not self.depths or any(not 0 <= d <= 1 for d in self.depths):
            raise ConfigError("need samples >= 1, some lengths, and depths in [0, 1]")


@dataclass(frozen=True)
class ZeroShotConfig(PasskeyConfig):
    text: str = "war-and-peace"
    ppl_lengths: tuple[int, ...] = (2048, 4096, 8192, 12288, 16384)
    stride: int = 256
    windows: int = 2  # scored blocks, aligned across lengths (the full protocol: every stride; too slow on a CPU)
    blowup: float = 2.0  # no scaling: PPL at the longest length / PPL at the trained length >= 2
    bounded: float = 1.5  # the NTK family: the same ratio <= 1.5


NO_FINETUNE = ("ntk", "dynamic-ntk", "yarn")  # the scalings claimed to work without fine-tuning


def _passkey_claims(cfg, scalings: list[RopeScaling], results, trained: int) -> list:
    longest = max(cfg.lengths)
    claims = []
    if longest <= trained:  # the claims are about prompts past the trained window (quick mode is not)
        return claims
    for s in scalings:
        acc = accuracy_at(results[s.describe()], longest)
        if s.name == "none":
            claims.append(check(f"no scaling fails passkey at {longest} tokens ({longest / trained:g}x its "
                                f"{trained}-token window): accuracy", acc, cfg.max_accuracy_unscaled, 0.0, "at_most"))
        elif s.name in NO_FINETUNE:
            claims.append(check(f"{s.describe()} keeps passkey at {longest} tokens without fine-tuning: accuracy",
                                acc, cfg.min_accuracy, 0.0, "at_least"))
    return claims


def _scalings(cfg) -> list[RopeScaling]:
    if "none" not in cfg.scalings:
        raise ConfigError("scalings must include 'none' (the baseline the claims compare against)")
    return load_scalings(cfg.scalings, cfg.factor)


@register("passkey", "passkey retrieval grid (lengths x depths) under RoPE scalings, zero-shot, on a real model",
          PasskeyConfig, quick={"lengths": (1024, 2048), "depths": (0.0, 1.0), "samples": 1,
                                "scalings": ("none", "ntk")}, demo=False)
def run_passkey_experiment(cfg: PasskeyConfig, ctx) -> Result:
    from attnlab.kv.experiments import load_model

    scalings = _scalings(cfg)
    model, tok = load_model(cfg.model, ctx)
    trained = model.config.max_position_embeddings
    results = run_passkey(model, tok, scalings, passkey_cases(cfg.lengths, cfg.depths, cfg.samples, cfg.seed), ctx)
    passkey_figure(ctx, results, trained)
    claims = _passkey_claims(cfg, scalings, results, trained)
    summary = (f"{cfg.model} (trained context {trained}), factor {cfg.factor:g}; passkey accuracy by scaling: "
               + ", ".join(f"{k} {np.mean([r.correct for r in v]):.0%}" for k, v in results.items()) + ".")
    return Result(claims, {"passkey": passkey_metrics(results)},
                  {"passkey.png": "passkey accuracy per (prompt length, key depth), one panel per scaling"}, summary)


@register("rope-zero-shot", "RoPE scalings without fine-tuning at 2x the trained window: passkey grid and "
          "long-context PPL on a real model", ZeroShotConfig,
          quick={"lengths": (1024, 2048), "depths": (0.0, 1.0), "samples": 1, "ppl_lengths": (512, 1024, 2048),
                 "windows": 1}, demo=False)
def run_zero_shot(cfg: ZeroShotConfig, ctx) -> Result:
    from attnlab.kv.experiments import load_model, text_ids

    scalings = _scalings(cfg)
    model, tok = load_model(cfg.model, ctx)
    trained = model.config.max_position_embeddings
    within = [n for n in cfg.ppl_lengths if n <= trained]
    if not within:
        raise ConfigError(f"ppl_lengths need one length within the model's trained context ({trained})")
    ref = max(within)  # the reference PPL: the longest context the model was trained for
    longest = max(cfg.ppl_lengths)
    ids = text_ids(tok, cfg.text, 2 * longest)  # the scored blocks spread over twice the longest length
    curves = run_longppl(model, ids, scalings, list(cfg.ppl_lengths), cfg.stride, cfg.windows, ctx)
    results = run_passkey(model, tok, scalings, passkey_cases(cfg.lengths, cfg.depths, cfg.samples, cfg.seed), ctx)
    ppl = {k: {n: c.ppl(n) for n in c.lengths} for k, c in curves.items()}
    label = {s.name: s.describe() for s in scalings}
    base = ppl[label["none"]][ref]
    claims = _passkey_claims(cfg, scalings, results, trained)
    if longest > trained:  # the blow-up and boundedness claims need a length past the window
        none = ppl[label["none"]]
        claims.append(check(f"no scaling: PPL blows up at {longest} tokens: PPL there / PPL at {ref} "
                            f"({none[longest]:.2f} / {base:.2f})", none[longest] / base, cfg.blowup, 0.0, "at_least"))
        for k in (label[n] for n in NO_FINETUNE if n in label):
            claims.append(check(f"{k}: PPL stays bounded at {longest} tokens: its PPL there / unscaled PPL at {ref} "
                                f"({ppl[k][longest]:.2f} / {base:.2f})", ppl[k][longest] / base, cfg.bounded, 0.0,
                                "at_most"))
    pi, ntk = label.get("pi"), label.get("ntk")
    if pi and ntk:
        short = min(cfg.ppl_lengths)
        claims.append(check(f"untuned PI is worse than NTK at short distances: PPL at {short} tokens, PI / NTK "
                            f"({ppl[pi][short]:.2f} / {ppl[ntk][short]:.2f})", ppl[pi][short] / ppl[ntk][short],
                            1.0, 0.0, "at_least"))
    longppl_figure(ctx, curves, trained)
    passkey_figure(ctx, results, trained)
    summary = (f"{cfg.model} (trained context {trained}), factor {cfg.factor:g}, text {cfg.text}. PPL at "
               f"{ref} / {longest} tokens: " + ", ".join(f"{k} {v[ref]:.2f} / {v[longest]:.2f}" for k, v in ppl.items())
               + ". Passkey accuracy: " + ", ".join(f"{k} {np.mean([r.correct for r in v]):.0%}"
                                                    for k, v in results.items()) + ".")
    return Result(claims, {"ppl": {k: {str(n): p for n, p in v.items()} for k, v in ppl.items()},
                           "passkey": passkey_metrics(results)},
                  {"longppl.png": "sliding-window PPL (stride 256) against context length, one curve per scaling",
                   "passkey.png": "passkey accuracy per (prompt length, key depth), one panel per scaling"}, summary)
