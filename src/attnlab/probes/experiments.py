"""``probes``: every registered probe streamed over a real model and text, the papers' claims checked.

One streamed pass over ``tokens`` tokens of the text with all probes at once (each reads only the hook
points it names), then the sink probe again with the first token replaced by each of ``replacements``
("\\n" and an ordinary token): the sink follows the position, not the token (StreamingLLM's
"4 '\\n' + 1020" row). Claims and their thresholds live in each probe's constructor defaults, fixed
before the first SmolLM2 run; quick mode (a few hundred tokens, for the demo) reports them as findings.

Cost on one core of the shared 2-core CPU, SmolLM2-135M: quick mode (256 tokens, every probe) 37 s;
the sinks alone over 2,048 tokens with the position check (three passes) 81 s; every probe over 2,048
tokens in one pass (``attnlab probe``) 74 s. Full mode: one pass of every probe over 4,096 tokens and two
sink passes.

Probe modules are found, not listed: every module of ``attnlab.probes`` other than the machinery
(:data:`MACHINERY`) is imported, and registers its probe class with ``@register``.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.core.errors import ConfigError, UsageError, first_line
from attnlab.experiments.claims import finding
from attnlab.experiments.registry import Result, register
from attnlab.probes.base import PROBES, Probe, make_probes

MACHINERY = ("base", "stream", "cli", "experiments", "plots")  # modules of the package that hold no probe
# The order probes are listed, run and reported in: the (attention first, then activations, then
# geometry); a module not named here still loads, after these, by name.
ORDER = ("sinks", "heavy", "massive", "scansnap", "superposition", "geometry")


def load_probes() -> list[str]:
    """Import every probe module of ``attnlab.probes`` (registering its probes); the registered names."""
    import attnlab.probes as package

    for info in pkgutil.iter_modules(package.__path__, "attnlab.probes."):
        if info.name.rsplit(".", 1)[-1] not in MACHINERY:
            importlib.import_module(info.name)

    def key(name: str) -> tuple:  # by module (ORDER, then by name); in a module, registration order (stable sort)
        module = PROBES.get(name).__module__.rsplit(".", 1)[-1]
        return (ORDER.index(module) if module in ORDER else len(ORDER), module)

    return sorted(PROBES.names(), key=key)


def chosen(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` checked against the registry (did you mean), or every registered probe for ()."""
    known = load_probes()
    for name in names:
        PROBES.get(name)
    return tuple(names) or tuple(known)


def check_readable(model: nn.Module, probes: list[Probe]) -> None:
    """UsageError naming the implementation tried when a probe needs attention patterns and the model
    cannot switch to eager attention (the only one that materialises them); the model is left as it was."""
    if not any(n.endswith("attn.pattern") for p in probes for n in p.needs):
        return
    impl = model.config._attn_implementation
    try:
        model.set_attn_implementation("eager")
    except Exception as e:  # transformers raises ValueError, ImportError or its own errors here
        raise UsageError(f"cannot read this model's attention patterns: switching its {impl!r} attention to "
                         f"'eager' failed ({first_line(e)}); use a model whose attention runs eagerly") from None
    model.set_attn_implementation(impl)


def run_probes(model: nn.Module, ids: torch.Tensor, names: tuple[str, ...], chunk: int, ctx, decode=None,
               corpus: torch.Tensor | None = None, window: int = 512, options: dict | None = None):
    """Stream ``ids`` (T,) once through ``model`` with the named probes, and ``corpus`` (default ``ids``) in
    independent windows of ``window`` tokens with the windowed ones (superposition): (probe name -> its
    metrics, the probes' claims, {figure file: caption}). ``decode``: ids -> text, for the probes' examples;
    ``options``: keyword options for the probes' constructors (each probe takes those it accepts)."""
    from attnlab.probes.stream import stream

    probes = make_probes(names, decode=decode, **(options or {}))
    check_readable(model, probes)
    cached = [p for p in probes if not p.windowed]
    windowed = [p for p in probes if p.windowed]
    if cached:
        with ctx.progress(ids.numel(), "probes") as bar:
            stream(model, ids, cached, chunk, bar)
    if windowed:
        corpus = ids if corpus is None else corpus
        with ctx.progress(corpus.numel(), f"{', '.join(p.name for p in windowed)} (windows of {window})") as bar:
            stream(model, corpus, windowed, chunk, bar, window=window)
    metrics, claims, figures = {}, [], {}
    for p in probes:
        metrics[p.name] = m = p.result()
        claims += p.claims(m)
        figures.update(p.figures(m, ctx))
    return metrics, claims, figures


def claim_lines(claims) -> list[str]:
    """One line per claim: status, what it says, the measured value."""
    return [f"[{c.status}] {c.claim}: {c.measured:.4g}" for c in claims]


@dataclass(frozen=True)
class ProbesConfig:
    model: str = "smollm2"
    text: str = "wikitext-2/test.txt"
    tokens: int = 4096
    chunk: int = 512
    probes: tuple[str, ...] = ()  # (): every registered probe
    replacements: tuple[str, ...] = ("\n", " the")  # first-token stand-ins for the position check
    corpus_tokens: int = 102400  # the windowed probes' corpus (superposition: >= 100k tokens), same text
    window: int = 512  # its independent windows
    judge: bool = True  # False (quick): a few hundred tokens are not the claims' setting: findings

    def __post_init__(self):
        if self.tokens < 2 or self.chunk < 1 or self.corpus_tokens < 2 or self.window < 2:
            raise ConfigError(f"tokens={self.tokens}, chunk={self.chunk}, corpus_tokens={self.corpus_tokens}, "
                              f"window={self.window}: need tokens, corpus_tokens and window >= 2, chunk >= 1")
        chosen(self.probes)


def _replacement_ids(tok, texts: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ConfigError(f"replacements: {text!r} is {len(ids)} tokens for this tokenizer; give single tokens")
        out[text] = ids[0]
    return out


def _position(model, ids, tok, swaps: dict[str, int], cfg, metrics: dict, ctx):
    """The sink probe with the first token replaced by each of ``swaps`` (label -> token id): (metrics,
    claims, figures)."""
    from attnlab.probes.plots import per_layer_lines
    from attnlab.probes.sinks import SinkProbe, position_check, position_claims

    probe, original = SinkProbe(), metrics["sinks"]
    with ctx.progress(ids.numel() * len(swaps), "sinks, first token replaced") as bar:
        replaced = position_check(model, ids, swaps, probe, cfg.chunk, bar)
    keep = ("deep_first_token_share", "sink_rate", "sink_rate_per_layer", "layer_first_token_share")
    out = {"original_token": tok.decode(ids[:1]), "original_id": int(ids[0]),
           **{label: {"token_id": swaps[label], **{k: m[k] for k in keep}} for label, m in replaced.items()}}
    name = per_layer_lines(ctx, {f"original {out['original_token']!r}": original["layer_first_token_share"],
                                 **{f"replaced by {label!r}": m["layer_first_token_share"]
                                    for label, m in replaced.items()}},
                           "sinks_position.png", "first token replaced", "mean first-token share over heads",
                           original["chance_first_token_share"], "uniform causal row")
    caption = ("Per layer, mean share of attention on the first token over heads and queries, for the text as it "
               f"is and with its first token ({out['original_token']!r}) replaced; dotted: a uniform causal row.")
    return out, position_claims(original, replaced, probe), {name: caption}


@register("probes", "inside a pretrained model: attention sinks, heavy hitters and the other probes, streamed "
          "over a real text, with the papers' claims", ProbesConfig,
          quick={"tokens": 256, "chunk": 128, "corpus_tokens": 1024, "judge": False})
def run_probes_experiment(cfg: ProbesConfig, ctx) -> Result:
    from attnlab.evals.inputs import load_model, text_ids

    model, tok = load_model(cfg.model, ctx.device)
    ids = text_ids(tok, cfg.text, cfg.tokens)
    names = chosen(cfg.probes)
    swaps = _replacement_ids(tok, cfg.replacements) if "sinks" in names else {}  # checked before the long pass
    corpus = None
    if any(PROBES.get(n).windowed for n in names):
        corpus = text_ids(tok, cfg.text, cfg.corpus_tokens, "--set corpus_tokens=N (or another text=)")
    metrics, claims, figures = run_probes(model, ids, names, cfg.chunk, ctx, tok.decode, corpus, cfg.window)
    if swaps:
        metrics["sinks_position"], more, fig = _position(model, ids, tok, swaps, cfg, metrics, ctx)
        claims, figures = claims + more, {**figures, **fig}
    if not cfg.judge:
        claims = [finding(c.claim, c.measured) if c.status in ("holds", "fails") else c for c in claims]
    corpus_line = "" if corpus is None else (f" Windowed probes over the first {corpus.numel()} tokens in "
                                             f"independent windows of {cfg.window}.")
    summary = (f"{cfg.model} on the first {ids.numel()} tokens of {cfg.text}, streamed in chunks of {cfg.chunk} "
               f"with the model's KV cache (full causal attention over the prefix); probes: {', '.join(names)}."
               + corpus_line
               + ("" if cfg.judge else " Quick mode: claims reported as findings."))
    return Result(claims, {"model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()), "chunk": cfg.chunk,
                           "corpus_tokens": 0 if corpus is None else int(corpus.numel()), "probes": list(names),
                           **metrics}, figures, summary)
