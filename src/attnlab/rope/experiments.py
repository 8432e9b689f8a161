"""Context extension without fine-tuning on a real model: passkey retrieval and long-context
perplexity under PI, NTK-aware, dynamic NTK and YaRN (the seed talk's last part).

``passkey`` (also ``attnlab passkey``, its flags built from :class:`PasskeyConfig`): the grid
lengths × depths × samples for each scaling, accuracy heat-maps, and where the longest prompt is past
the trained window the claims that no scaling fails there and NTK / dynamic NTK / YaRN keep passkey.
``rope-zero-shot``: the same grid plus sliding-window perplexity at several context lengths (the
evaluation ``attnlab longppl`` runs, with the same knobs), and the claims: at 2× the trained window no
scaling fails passkey and its perplexity blows up; NTK / dynamic NTK / YaRN keep passkey and a bounded
perplexity; PI untuned is worse than NTK at short distances. Both run the evaluations of
:mod:`attnlab.rope.compare`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.core.errors import ConfigError
from attnlab.evals.inputs import load_model, text_ids
from attnlab.evals.passkey import accuracy_at, passkey_cases, passkey_metrics
from attnlab.experiments.claims import check
from attnlab.experiments.registry import Result, register
from attnlab.methods import Context, apply
from attnlab.rope.compare import longppl_by_scaling, passkey_by_scaling
from attnlab.rope.configs import PasskeyConfig, check_ppl_windows
from attnlab.rope.plots import longppl_figure, passkey_figure
from attnlab.rope.scalings import RopeScaling

FIGURE = {"passkey.png": "passkey accuracy per (prompt length, key depth), one panel per scaling"}


@dataclass(frozen=True)
class ZeroShotConfig(PasskeyConfig):
    rope_method = False  # its claims compare each scaling of --scalings with none
    text: str = "war-and-peace"
    ppl_lengths: tuple[int, ...] = (2048, 4096, 8192, 12288, 16384)
    stride: int = 256
    windows: int = 2  # scored blocks, aligned across lengths; 0: every stride (the full protocol, too slow on a CPU)
    blowup: float = 2.0  # no scaling: PPL at the longest length / PPL at the trained length >= 2
    bounded: float = 1.5  # the NTK family: the same ratio <= 1.5

    def __post_init__(self):
        super().__post_init__()
        check_ppl_windows(self.ppl_lengths, self.stride, self.windows, None, lengths_flag="ppl_lengths")
        if "none" not in self.scalings:  # checked with the config: a sweep refuses such a cell up front
            raise ConfigError("scalings must include 'none' (the PPL claims compare against it)")


NO_FINETUNE = ("ntk", "dynamic-ntk", "yarn")  # the scalings claimed to work without fine-tuning


def _accuracy(results) -> dict:
    """Scalars a sweep can tabulate and plot (``--metric accuracy``): the share of the grid's prompts answered
    right, in all and per scaling."""
    everything = [r.correct for rows in results.values() for r in rows]
    return {"accuracy": float(np.mean(everything)),
            "accuracy_by_scaling": {k: float(np.mean([r.correct for r in rows])) for k, rows in results.items()}}


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


def passkey_lines(passkey: dict, lengths) -> list[str]:
    """One line per scaling: its accuracy at each prompt length (``passkey``: metrics.json's records)."""
    def accuracy(rows, n):
        cell = [r["correct"] for r in rows if r["length"] == n]
        return sum(cell) / len(cell)

    return [f"{name}: passkey accuracy " + ", ".join(f"{n}: {accuracy(rows, n):.0%}" for n in lengths)
            for name, rows in passkey.items()]


@register("passkey", "passkey retrieval grid (lengths x depths) under RoPE scalings, zero-shot, on a real model",
          PasskeyConfig, quick={"lengths": (1024, 2048), "depths": (0.0, 1.0), "samples": 1,
                                "scalings": ("none", "ntk")}, demo=False)
def run_passkey(cfg: PasskeyConfig, ctx) -> Result:
    scalings = cfg.scalings_applied()
    model, tok = load_model(cfg.model, ctx.device)
    trained = model.config.max_position_embeddings
    cases = passkey_cases(cfg.lengths, cfg.depths, cfg.samples, cfg.seed)
    with apply(model, *cfg.methods_applied(), ctx=Context(tok, ctx.device, None, cfg.model)):  # under every scaling
        results = passkey_by_scaling(model, tok, scalings, cases, ctx)
    passkey_figure(ctx, results, trained)
    claims, accuracy = _passkey_claims(cfg, scalings, results, trained), _accuracy(results)
    metrics = {"command": ctx.command, "model": cfg.model, "trained_context": trained, "factor": cfg.factor,
               "passkey": passkey_metrics(results), **accuracy}
    summary = (f"{cfg.model} (trained context {trained}), factor {cfg.factor:g}; passkey accuracy by scaling: "
               + ", ".join(f"{k} {a:.0%}" for k, a in accuracy["accuracy_by_scaling"].items()) + ".\n"
               + "\n".join(f"- {line}" for line in passkey_lines(metrics["passkey"], cfg.lengths)))
    return Result(claims, metrics, dict(FIGURE), summary)


@register("rope-zero-shot", "RoPE scalings without fine-tuning at 2x the trained window: passkey grid and "
          "long-context PPL on a real model", ZeroShotConfig,
          quick={"lengths": (1024, 2048), "depths": (0.0, 1.0), "samples": 1, "ppl_lengths": (512, 1024, 2048),
                 "windows": 1}, demo=False)
def run_zero_shot(cfg: ZeroShotConfig, ctx) -> Result:
    scalings = cfg.scalings_applied()
    model, tok = load_model(cfg.model, ctx.device)
    trained = model.config.max_position_embeddings
    within = [n for n in cfg.ppl_lengths if n <= trained]
    if not within:
        raise ConfigError(f"ppl_lengths need one length within the model's trained context ({trained})")
    ref = max(within)  # the reference PPL: the longest context the model was trained for
    longest = max(cfg.ppl_lengths)
    ids = text_ids(tok, cfg.text, 2 * longest)  # the scored blocks spread over twice the longest length
    with apply(model, *cfg.methods_applied(), ctx=Context(tok, ctx.device, None, cfg.model)):  # under every scaling
        curves = longppl_by_scaling(model, ids, scalings, list(cfg.ppl_lengths), cfg.stride, cfg.windows, ctx)
        results = passkey_by_scaling(model, tok, scalings,
                                     passkey_cases(cfg.lengths, cfg.depths, cfg.samples, cfg.seed), ctx)
    accuracy = _accuracy(results)
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
               + ". Passkey accuracy: " + ", ".join(f"{k} {a:.0%}" for k, a in accuracy["accuracy_by_scaling"].items())
               + ".")
    return Result(claims, {"ppl": {k: {str(n): p for n, p in v.items()} for k, v in ppl.items()},
                           "passkey": passkey_metrics(results), **accuracy},
                  {"longppl.png": f"sliding-window PPL (stride {cfg.stride}) against context length, one curve per "
                                  "scaling",
                   **FIGURE}, summary)
