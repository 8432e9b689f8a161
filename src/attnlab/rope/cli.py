"""``attnlab passkey`` and ``attnlab longppl``: context extension by RoPE scaling, measured on any
RoPE model — passkey retrieval over a grid of lengths × depths, and sliding-window perplexity at
several context lengths, one run per scaling, side by side. ``attnlab passkey`` is the ``passkey``
experiment (with its claims where the longest prompt is past the trained window)."""
from __future__ import annotations

from attnlab.experiments.command import add_experiment_command
from attnlab.rope.configs import LongPPLRun, PasskeyConfig

GROUP = "inference"

CPU_COST = "7 s at 4k, 19 s at 8k and 60 s at 16k tokens for SmolLM2 (benchmarks/README.md)"
EPILOG = f"""examples:
  attnlab models fetch smollm2        # once: SmolLM2-135M (trained context 8,192)
  attnlab passkey --model smollm2 --factor 2 --lengths 4096,8192,16384 --depths 0,0.5,1 --out runs/passkey
  attnlab longppl --model smollm2 --factor 2 --lengths 2048,8192,16384 --windows 2 --out runs/longppl
  attnlab longppl --model runs/llama/model --scalings none,pi --factor 4 --lengths 256,1024 --out runs/lp

--factor s is the target context over the trained one (s >= 1); every scaling but none uses it.
Writes OUT/config.json, OUT/metrics.json, OUT/report.md and a figure (passkey.png, longppl.png).
A prompt of N tokens costs one prefill of N tokens per scaling: on a 2-core CPU about {CPU_COST}.
passkey's claims (where the longest prompt is past the trained window) keep the experiment's thresholds,
fixed before its first run and written to config.json."""

CLAIM_THRESHOLDS = ("min_accuracy", "max_accuracy_unscaled")  # fixed before the first run: not flags


def add_commands(sub) -> None:
    add_experiment_command(sub, "passkey", PasskeyConfig, help="passkey retrieval grid under RoPE scalings",
                           description=__doc__, epilog=EPILOG, skip=CLAIM_THRESHOLDS)
    add_experiment_command(sub, "longppl", LongPPLRun, help="sliding-window perplexity at several context lengths "
                           "under RoPE scalings", description=__doc__, epilog=EPILOG)
