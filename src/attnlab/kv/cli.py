"""``attnlab stream``: stream a text through a model with one KV-cache policy and measure it:
perplexity (token by token, as StreamingLLM and H2O evaluate), KV bytes and decode tokens/s,
beside the dense cache (and, on request, the sliding window with re-computation)."""
from __future__ import annotations

from attnlab.experiments.command import add_experiment_command
from attnlab.kv.configs import StreamRun

GROUP = "inference"

EPILOG = """examples:
  attnlab models fetch smollm2                    # once: the real model, into the cache
  attnlab stream --model smollm2 --out runs/sinks                 # the default: sinks 4+252, rolling positions
  attnlab stream --method sinks+h2o:budget=256,recent=128,positions=rolling --tokens 4096 --out runs/sh2o
  attnlab stream --method h2o:budget=0.2 --out runs/h2o20          # positions original, as H2O's masks
  attnlab stream --method knorm:budget=256,positions=rolling --out runs/knorm   # keys of smallest L2 norm
  attnlab stream --method int8 --method cats:keep=0.5 --method tova:budget=256 --out runs/composed
  attnlab stream --model runs/llama/model --text war-and-peace --method window:budget=128 --out runs/w
(`attnlab methods` lists every method and its options; the older --policy/--budget/--n-sink/--recent/
--positions/--quant flags still work for one release and say their new spelling.)

--chunk N feeds N tokens per forward: exact for the dense cache, an approximation for the
evicting ones (a chunk sees the cache as it was before the chunk), and much faster on a CPU.
Writes OUT/config.json, OUT/metrics.json, OUT/report.md, OUT/stream.png (NLL per position, KV
bytes) and OUT/nll.json."""


def add_commands(sub) -> None:
    add_experiment_command(sub, "stream", StreamRun, help="streaming perplexity, memory and speed of a KV-cache "
                           "policy on a real model", description=__doc__, epilog=EPILOG)
