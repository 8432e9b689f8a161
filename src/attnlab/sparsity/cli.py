"""``attnlab sparsity``: measure a model's contextual sparsity at one keep fraction: perplexity dense
vs with one rule deciding per token which MLP neurons (and, on request, attention heads) survive,
the per-layer profile (neurons kept, |h| mass captured), the residual stream's cosine across layers
and how much of a token's oracle set the next token reuses. The rule may be Deja Vu's trained
predictors (``--rule predicted``), saved beside the model by ``attnlab reproduce dejavu``."""
from __future__ import annotations

import textwrap

from attnlab.experiments.command import add_experiment_command
from attnlab.sparsity.configs import CALIBRATED, PREDICTED, SparsityRun
from attnlab.sparsity.registry import RULES

GROUP = "inference"


def _rules() -> str:
    """Each registered rule and what a token keeps under it, one entry each."""
    width = max(map(len, RULES)) + 2
    return "\n".join(textwrap.fill(kind.keeps, 104, initial_indent=f"  {name:{width}}",
                                   subsequent_indent=" " * (width + 2)) for name, kind in RULES.items())


EPILOG = f"""examples:
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
{_rules()}
{CALIBRATED} are calibrated on --calibration (never the evaluation text) to keep --keep of what they
threshold there; on the evaluation text they keep about that share (reported). {PREDICTED} reads the
predictors saved beside the model's weights (M/predictors/neurons-<source>-r<rank>-keep<keep>, --keep
choosing them) or --predictors DIR.
--heads-keep K also keeps, per token, only the share K of attention heads with the largest output.
Every position of every --window tokens is sparsified (masks on the dense computation: this
measures quality, not speed). Writes OUT/config.json, OUT/metrics.json, OUT/report.md and
OUT/sparsity.png (per-layer profile, cosine, consecutive-token overlap).

--speed also times decoding at batch 1: the first --window tokens of the text as the prompt, a few
warm-up steps, then --speed-steps greedy steps with a DynamicCache, dense vs the MLPs computing only
the kept neurons (SparseMLP gather mode; attention heads stay dense). Written to metrics.json as
"decode". A rule that needs the dense h to choose (the oracle) makes its time no real saving (an upper
bound on quality, a lower bound on cost); the other rules choose before the rows they skip, so theirs
is (the predictors' own multiply-adds are inside the timed steps)."""


def add_commands(sub) -> None:
    add_experiment_command(sub, "sparsity", SparsityRun, help="contextual sparsity: perplexity with per-token MLP "
                           "neurons / heads kept", description=__doc__, epilog=EPILOG)
