"""``attnlab sparsity``: measure a model's contextual sparsity at one keep fraction: perplexity dense
vs with one rule deciding per token which MLP neurons (and, on request, attention heads) survive,
the per-layer profile (neurons kept, |h| mass captured), the residual stream's cosine across layers
and how much of a token's oracle set the next token reuses. The rule may be Deja Vu's trained
predictors (``--rule predicted``), saved beside the model by ``attnlab reproduce dejavu``."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from attnlab.core.errors import UsageError
from attnlab.experiments.registry import Experiment, Result

GROUP = "inference"

EPILOG = """examples:
  attnlab models fetch smollm2                       # once: the real model, into the cache
  attnlab sparsity --model smollm2 --rule oracle --keep 0.5 --out runs/oracle50
  attnlab sparsity --rule cats --keep 0.5 --calibration wikitext-2/valid.txt --out runs/cats50
  attnlab sparsity --rule teal --keep 0.35 --tokens 4096 --out runs/teal35
  attnlab sparsity --rule oracle --keep 1 --heads-keep 0.5 --out runs/heads50    # heads only
  attnlab sparsity --model runs/llama/model --text war-and-peace --rule static --keep 0.25 --out runs/s
  attnlab sparsity --rule cats --keep 0.5 --speed --speed-steps 64 --out runs/cats50-speed
  attnlab reproduce dejavu --out runs/dejavu         # once: trains predictors, saved beside the model
  attnlab sparsity --rule predicted --keep 0.5 --speed --out runs/predicted50
  attnlab sparsity --rule predicted --predictor-source own --predictors runs/dejavu/predictors --out runs/p

rules (h = act(gate(x)) * up(x), the input of down_proj; its entries are the "neurons"):
  oracle  per token the top-k of |h| (Deja Vu's contextual sparsity; needs h itself: an upper bound)
  cats    per token the neurons with |act(gate(x))| above a per-layer threshold (CATS)
  teal    per token the channels of x entering the MLP and of h entering down_proj above per-layer
          thresholds (TEAL)
  static  the same neurons for every token: per layer the most active on average (mean |h|)
  predicted  per token the top-k by Deja Vu's low-rank predictors (trained by `attnlab reproduce
          dejavu`) from the previous layer's MLP input (--predictor-source lookahead, the default;
          layer 0 from its own) or the layer's own (own); read from beside the model's weights
          (M/predictors/neurons-<source>-r<rank>-keep<keep>, --keep choosing them) or --predictors DIR
cats, teal and static are calibrated on --calibration (never the evaluation text) to keep --keep
of what they threshold there; on the evaluation text they keep about that share (reported).
--heads-keep K also keeps, per token, only the share K of attention heads with the largest output.
Every position of every --window tokens is sparsified (masks on the dense computation: this
measures quality, not speed). Writes OUT/config.json, OUT/metrics.json, OUT/report.md and
OUT/sparsity.png (per-layer profile, cosine, consecutive-token overlap).

--speed also times decoding at batch 1: the first --window tokens of the text as the prompt, a few
warm-up steps, then --speed-steps greedy steps with a DynamicCache, dense vs the MLPs computing only
the kept neurons (SparseMLP gather mode; attention heads stay dense). Written to metrics.json as
"decode". The oracle's set needs the dense h to choose, so its time is not a real saving (an upper
bound on quality, a lower bound on cost); the cats, teal, static and predicted sets are chosen
before the rows they skip, so theirs is (the predictors' own multiply-adds are inside the timed steps)."""

PREDICTED = "predicted"  # built from saved predictors here, not in sparsity.rules (a pure module)


@dataclass(frozen=True)
class SparsityRun:
    """One ``attnlab sparsity`` run: its flags, as the run's config."""

    model: str = "smollm2"
    rule: str = "oracle"
    keep: float = 0.5
    heads_keep: float | None = None
    text: str = "wikitext-2/test.txt"
    calibration: str = "wikitext-2/valid.txt"
    tokens: int = 2048
    calibration_tokens: int = 2048
    window: int = 512
    speed: bool = False
    speed_steps: int = 32
    predictors: str = ""  # --rule predicted: a dejavu run's predictors folder; "": those beside the model
    predictor_source: str = "lookahead"
    predictor_rank: int | None = None  # beside the model: None picks the one rank saved for --keep

    def __post_init__(self):
        from attnlab.core.registry import Registry
        from attnlab.sparsity.predictors import SOURCES
        from attnlab.sparsity.rules import RULES, keep_count

        rules = Registry("sparsity rule")
        for name in (*RULES, PREDICTED):
            rules.add(name, name)
        rules.get(self.rule)  # an unknown rule: did you mean
        keep_count(1, self.keep)
        if self.rule != PREDICTED and (self.predictors or self.predictor_rank is not None):
            raise UsageError("--predictors and --predictor-rank are for --rule predicted")
        if self.predictor_source not in SOURCES:
            raise UsageError(f"--predictor-source {self.predictor_source}: choose {' or '.join(SOURCES)}")
        if self.predictor_rank is not None and self.predictor_rank < 1:
            raise UsageError(f"--predictor-rank {self.predictor_rank}: give the rank r the predictors were "
                             "trained with (e.g. 128)")
        if self.heads_keep is not None:
            keep_count(1, self.heads_keep)
        for flag, n in (("--tokens", self.tokens), ("--calibration-tokens", self.calibration_tokens),
                        ("--window", self.window)):
            if n < 2:
                raise UsageError(f"{flag} {n}: give at least 2 tokens")
        if self.speed_steps < 1:
            raise UsageError(f"--speed-steps {self.speed_steps}: give at least 1 timed decode step")


def _rule(cfg: SparsityRun, model, calib, ctx) -> tuple[object, dict | None]:
    """The rule at ``cfg.keep`` (calibrated on ``calib``, or read from saved predictors), and for
    ``predicted`` what it was read from and what it costs."""
    from attnlab.models import arch
    from attnlab.sparsity.measure import rule_builder
    from attnlab.sparsity.predicted import saved_rule

    if cfg.rule != PREDICTED:
        with ctx.progress(0 if calib is None else calib.numel(), f"calibrate {cfg.rule}") as bar:
            return rule_builder(model, cfg.rule, calib, cfg.window, bar)(cfg.keep), None
    rule, folders = saved_rule(model, cfg.model, cfg.keep, cfg.predictor_source, cfg.predictors, cfg.predictor_rank)
    used = rule.lookahead or rule.own
    return rule, {"source": cfg.predictor_source, "folders": [str(f) for f in folders], "r": used.meta.r,
                  **used.cost(arch.mlp(model, 0).gate_proj is not None)}


def run_sparsity(cfg: SparsityRun, ctx) -> Result:
    """Dense vs sparse perplexity, the sparse run's per-layer profile, cosine and token overlap."""
    from contextlib import ExitStack

    from attnlab.sparsity.measure import layer_profile, load_texts, perplexity
    from attnlab.sparsity.similarity import dense_stats
    from attnlab.sparsity.heads import SparseHeads
    from attnlab.sparsity.mlp import SparseMLP
    from attnlab.sparsity.record import SparsityRecord
    from attnlab.sparsity.plots import layer_figure

    calibration = () if cfg.rule in ("oracle", PREDICTED) else (cfg.calibration,)
    model, ids, calib = load_texts(cfg.model, cfg.text, cfg.tokens, calibration, cfg.calibration_tokens,
                                   ctx.device, "--text PATH", "--calibration PATH")
    rule, predictors = _rule(cfg, model, calib, ctx)
    with ctx.progress(ids.numel(), "dense, cosine, overlap") as bar:
        dense, cos, overlaps = dense_stats(model, ids, (cfg.keep,), cfg.window, bar)
    overlap = overlaps[cfg.keep]
    record = SparsityRecord()
    with ExitStack() as stack, ctx.progress(ids.numel(), cfg.rule) as bar:
        stack.enter_context(SparseMLP(model, rule, record=record))
        if cfg.heads_keep is not None:
            stack.enter_context(SparseHeads(model, cfg.heads_keep))
        sparse = perplexity(model, ids, cfg.window, progress=bar)
    profile = layer_profile(record)
    decode = None
    if cfg.speed:
        from attnlab.sparsity.speed import decode_speed

        with ctx.progress(2, "decode speed") as bar:
            decode = decode_speed(model, ids[:cfg.window], rule, cfg.speed_steps)
            bar.update(2)
    layer_figure(ctx, {cfg.rule: profile}, cfg.keep, cos.layer.tolist(), overlap.tolist(), "sparsity.png")
    metrics = {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
               "rule": cfg.rule, "keep": cfg.keep, "heads_keep": cfg.heads_keep, "dense_ppl": dense,
               "sparse_ppl": sparse, "ppl_increase": sparse / dense - 1, "profile": profile,
               "cosine_per_layer": cos.layer.tolist(), "overlap_per_layer": overlap.tolist()}
    if decode is not None:
        metrics["decode"] = decode
    if predictors is not None:
        metrics["predictors"] = predictors
    summary = "\n".join(f"- {line}" for line in result_lines(metrics))
    return Result([], metrics, {"sparsity.png": f"Per layer: neurons {cfg.rule} kept and the share of |h| mass "
                                "they carry; cosine of the residual stream across the layer; share of a token's "
                                f"oracle set (top {cfg.keep:g} of |h|) that the next token reuses."}, summary)


def result_lines(m: dict) -> list[str]:
    """What a run found, one line each: dense and sparse PPL, what was kept, cosine and reuse."""
    from attnlab.sparsity.speed import speed_line

    heads = "" if m["heads_keep"] is None else f", heads {m['heads_keep']:g}"
    p, cos, ov = m["profile"], m["cosine_per_layer"], m["overlap_per_layer"]
    return [f"dense: PPL {m['dense_ppl']:.3f}",
            f"{m['rule']} keep {m['keep']:g}{heads}: PPL {m['sparse_ppl']:.3f} ({m['ppl_increase']:+.2%}), "
            f"neurons kept {p['overall_kept']:.1%}, |h| mass captured {p['overall_mass']:.1%}, entries of h "
            f"exactly zero {p['overall_zero']:.1%}",
            f"residual cosine across layers: mean {sum(cos) / len(cos):.3f}, min {min(cos):.3f} (layer "
            f"{cos.index(min(cos))})",
            f"next token reuses {sum(ov) / len(ov):.1%} of a token's oracle set (chance {m['keep']:.0%})"
            ] + ([speed_line(m["decode"])] if "decode" in m else [])


SPARSITY = Experiment("sparsity", "contextual sparsity of a model's MLP (and heads) at one keep fraction",
                      SparsityRun, run_sparsity)


def add_commands(sub) -> None:
    p = sub.add_parser("sparsity", help="contextual sparsity: perplexity with per-token MLP neurons / heads kept",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=SparsityRun.model,
                   help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--rule", default=SparsityRun.rule,
                   help="oracle, cats, teal, static or predicted (Deja Vu's trained predictors; default oracle)")
    p.add_argument("--keep", type=float, default=SparsityRun.keep,
                   help="share of MLP neurons kept per token, in (0, 1] (default 0.5)")
    p.add_argument("--heads-keep", type=float, default=None,
                   help="also keep only this share of attention heads per token, in (0, 1]")
    p.add_argument("--text", default=SparsityRun.text,
                   help="evaluation text: a file, or wikitext-2/test.txt / kjv / war-and-peace")
    p.add_argument("--calibration", default=SparsityRun.calibration,
                   help="calibration text for cats, teal and static (default wikitext-2/valid.txt)")
    p.add_argument("--tokens", type=int, default=SparsityRun.tokens, help="evaluation tokens (default 2048)")
    p.add_argument("--calibration-tokens", type=int, default=SparsityRun.calibration_tokens,
                   help="calibration tokens (default 2048)")
    p.add_argument("--window", type=int, default=SparsityRun.window,
                   help="tokens per forward; each window is scored on its own (default 512)")
    p.add_argument("--speed", action="store_true",
                   help="also time greedy decoding at batch 1, dense vs the MLPs on the kept neurons only "
                        "(the oracle's set costs a dense computation: its speed is not a real saving; cats, "
                        "teal, static and predicted sets are)")
    p.add_argument("--speed-steps", type=int, default=SparsityRun.speed_steps,
                   help="timed greedy decode steps for --speed (default 32)")
    p.add_argument("--predictors", default=SparsityRun.predictors, metavar="DIR",
                   help="--rule predicted: a dejavu run's predictors folder (with own/ and lookahead/); default: "
                        "those saved beside the model for --keep (train them with `attnlab reproduce dejavu`)")
    p.add_argument("--predictor-source", default=SparsityRun.predictor_source, choices=("own", "lookahead"),
                   help="--rule predicted: predict layer i from its own MLP input or from layer i-1's "
                        "(lookahead; default)")
    p.add_argument("--predictor-rank", type=int, default=None, metavar="R",
                   help="--rule predicted, beside the model: the predictors' rank r, where several are saved")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.set_defaults(func=cmd_sparsity)


def cmd_sparsity(args) -> int:
    from attnlab.experiments.runner import check_device, command_line, run_into

    cfg = SparsityRun(args.model, args.rule, args.keep, args.heads_keep, args.text, args.calibration, args.tokens,
                      args.calibration_tokens, args.window, args.speed, args.speed_steps, args.predictors,
                      args.predictor_source, args.predictor_rank)
    result = run_into(SPARSITY, cfg, args.out, check_device(args.device), command_line(args.argv))
    for line in result_lines(result.metrics):
        print(line)
    print(f"results: {args.out}/metrics.json, {args.out}/sparsity.png, {args.out}/report.md", file=sys.stderr)
    return 0
