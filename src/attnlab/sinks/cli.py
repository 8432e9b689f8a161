"""``attnlab sink-table``: StreamingLLM's sink table for any causal LM -- stream a text token by token
through caches n + (W - n) (n sinks kept, the rest a recent window; positions rolling) and print the
perplexity of each, beside the published 160M numbers. A model pre-trained with a sink token (attnlab
train --attention sink-token) gets its sink first; its 0+W cache then evicts it, on purpose.

To pre-train the variants and compare them, run ``attnlab reproduce sink-pretraining``."""
from __future__ import annotations

from attnlab.experiments.command import add_experiment_command
from attnlab.sinks.configs import SinkTableRun

GROUP = "inference"

EPILOG = """examples:
  attnlab sink-table --model smollm2 --text kjv --window 256 --out runs/sinks-smollm2
  attnlab sink-table --model runs/sink-token/model --text war-and-peace --window 128 --sinks 0,1,4 --out runs/st
Writes OUT/config.json, OUT/metrics.json (PPL per cache), OUT/sink_table.png and OUT/report.md."""


def add_commands(sub) -> None:
    add_experiment_command(sub, "sink-table", SinkTableRun, help="stream a model through caches n+(W-n): how many "
                           "attention sinks it needs", description=__doc__, epilog=EPILOG)
