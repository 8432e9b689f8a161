"""``attnlab eval``: a model's zero-/few-shot accuracy through lm-evaluation-harness, with the methods that
alter it applied while it answers (a KV policy the context streams through, a contextual-sparsity rule on
its MLPs, a RoPE scaling)."""
from __future__ import annotations

from attnlab.accuracy.configs import EvalRun
from attnlab.experiments.command import add_experiment_command

GROUP = "inference"

EPILOG = """examples:
  attnlab eval --tasks copa,piqa,arc_easy --limit 500 --out runs/acc                 # dense SmolLM2, 5-shot
  attnlab eval --tasks copa,piqa --method h2o:budget=0.2 --out runs/acc-h2o20          # H2O keeping 20% of the context
  attnlab eval --tasks piqa --method sinks:budget=0.5,positions=rolling --out runs/acc-sinks50
  attnlab eval --tasks arc_easy --method cats:keep=0.5 --method int8 --out runs/acc-cats50-int8
  attnlab eval --tasks lambada --shots 0 --limit 200 --out runs/lambada
  attnlab eval --data ../shared/data/eval --tasks winogrande --out runs/wino
  attnlab sweep eval --grid "methods=sinks:budget=0.2;h2o:budget=0.2;tova:budget=0.2" --out runs/acc-sweep

protocol (lm-evaluation-harness's, through its LM API, task configs read from local JSON-lines files):
  multiple choice (copa, openbookqa, piqa, siqa, arc_easy, arc_challenge, boolq): each choice is scored
    by the log-likelihood the model gives it after the prompt; acc = the highest-scoring choice is the
    gold one; acc_norm = the same with each choice's log-likelihood divided by its length in bytes (so long
    answers are not penalised for their length).
  winogrande: the same ending scored after each of the two contexts (partial scoring); acc only.
  lambada: acc = the last word is the model's greedy continuation, token for token; and its perplexity.
  Standard errors are lm-eval's (the binomial standard error of the mean for acc).
  --shots K puts K solved items of the same task (drawn with --seed, never the item itself) before each
  item: the accuracy tables use 5, so that the prompt is long enough for a KV budget to evict something.

KV budgets: lm-eval scores a choice with one prefill, which a KV policy cannot evict from, so here the
context is streamed through the policy --chunk tokens at a time (eviction between chunks, as the context
grows), and each choice is scored against the evicted cache. budget=0.2 keeps 20% of the context seen;
the report gives, per task, the share of context tokens evicted. Without a KV method the cache is
transformers' own and the scores equal lm-eval's `hf` model's.
Data: the task files ship with attnlab (eval/<task>.jsonl); --data DIR reads another folder of such files.
Writes OUT/config.json, OUT/metrics.json (per task: acc, acc_norm, standard errors, chance, evicted),
OUT/accuracy.png and OUT/report.md."""


def add_commands(sub) -> None:
    add_experiment_command(sub, "eval", EvalRun, help="zero-/few-shot accuracy (COPA, PIQA, ARC, ...) with methods "
                           "applied, through lm-evaluation-harness", description=__doc__, epilog=EPILOG)
