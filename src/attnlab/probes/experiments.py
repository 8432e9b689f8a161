"""``probes``: every registered probe streamed over a real model and text, the papers' claims checked.

One streamed pass over ``tokens`` tokens of the text with all probes at once (each reads only the hook
points it names), then the sink probe again with the first token replaced by each of ``replacements``
("\\n" and an ordinary token): the sink follows the position, not the token (StreamingLLM's
"4 '\\n' + 1020" row). Claims and their thresholds live in each probe's constructor defaults, fixed
before the first SmolLM2 run; quick mode (a few hundred tokens, for the demo) decides the claims a short
text can (sinks, massive activations, the weights' geometry) and reports the others unresolved.

Cost on one core of the shared 2-core CPU, SmolLM2-135M: quick mode (256 tokens, every probe) 37 s;
the sinks alone over 2,048 tokens with the position check (three passes) 81 s; every probe over 2,048
tokens in one pass (``attnlab probe``) 74 s. Full mode: one pass of every probe over 4,096 tokens and two
sink passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnlab.core.errors import ConfigError
from attnlab.experiments.registry import Result, register
from attnlab.methods.configured import NOT_KV, configured, enter_configured, methods_option
from attnlab.probes.base import PROBES
from attnlab.probes.configs import ProbeRun
from attnlab.probes.run import chosen, run_probes
from attnlab.view.build import write_view


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
    view: int = 512  # tokens of the text in view.html (attnlab view's page); 0: none
    judge: bool = True  # False (quick): a few hundred tokens decide some claims; the others are unresolved
    methods: tuple[str, ...] = methods_option()  # weight, RoPE or sparsity methods the probed model runs under

    METHOD_KINDS: ClassVar = NOT_KV
    METHOD_WHY: ClassVar = ProbeRun.METHOD_WHY

    def __post_init__(self):
        if self.tokens < 2 or self.chunk < 1 or self.corpus_tokens < 2 or self.window < 2 or self.view < 0:
            raise ConfigError(f"tokens={self.tokens}, chunk={self.chunk}, corpus_tokens={self.corpus_tokens}, "
                              f"window={self.window}, view={self.view}: need tokens, corpus_tokens and window >= 2, "
                              "chunk >= 1, view >= 0")
        chosen(self.probes)
        configured(self)


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
    enter_configured(cfg, model, tok, ctx)
    ids = text_ids(tok, cfg.text, cfg.tokens)
    names = chosen(cfg.probes)
    swaps = _replacement_ids(tok, cfg.replacements) if "sinks" in names else {}  # checked before the long pass
    corpus = None
    if any(PROBES.get(n).windowed for n in names):
        corpus = text_ids(tok, cfg.text, cfg.corpus_tokens, "--set corpus_tokens=N (or another text=)")
    short = None if cfg.judge else (f"quick mode: {ids.numel()} tokens are too few for this claim (the full run "
                                    f"reads {ProbesConfig.tokens:,})")
    metrics, claims, figures = run_probes(model, ids, names, cfg.chunk, ctx, tok.decode, corpus, cfg.window,
                                          short=short)
    if swaps:
        metrics["sinks_position"], more, fig = _position(model, ids, tok, swaps, cfg, metrics, ctx)
        claims, figures = claims + more, {**figures, **fig}
    links = write_view(model, tok, ids, ctx.out, {"model": cfg.model, "text": cfg.text}, cfg.view, ctx.progress)
    corpus_line = "" if corpus is None else (f" Windowed probes over the first {corpus.numel()} tokens in "
                                             f"independent windows of {cfg.window}.")
    summary = (f"{cfg.model} on the first {ids.numel()} tokens of {cfg.text}, streamed in chunks of {cfg.chunk} "
               f"with the model's KV cache (full causal attention over the prefix); probes: {', '.join(names)}."
               + corpus_line
               + ("" if cfg.judge else " Quick mode: the claims a short text cannot decide are unresolved."))
    return Result(claims, {"model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()), "chunk": cfg.chunk,
                           "corpus_tokens": 0 if corpus is None else int(corpus.numel()), "probes": list(names),
                           **metrics}, figures, summary, links)
