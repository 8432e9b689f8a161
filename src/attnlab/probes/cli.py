"""``attnlab probe``: stream a text through a model with a chosen set of probes (attention sinks, heavy
hitters, ...) and write what each measured, the papers' claims it checks, and its figures. The model
runs in chunks with its own KV cache, so a chunk attends to the whole prefix while only one layer's
attention pattern for one chunk is held at a time."""
from __future__ import annotations

from attnlab.experiments.command import HelpFormatter, add_experiment_command
from attnlab.probes.configs import ProbeRun

GROUP = "inference"

EPILOG = """examples:
  attnlab models fetch smollm2                       # once: the real model, into the cache
  attnlab probe --out runs/probes                    # every probe, SmolLM2, 2,048 tokens of WikiText-2 test
  attnlab probe --probes sinks --tokens 8192 --out runs/sinks8k
  attnlab probe --probes sinks,heavy-hitters --text war-and-peace --tokens 16384 --chunk 512 --out runs/wp
  attnlab probe --model runs/llama/model --probes sinks --text kjv --out runs/own-sinks
  attnlab probe --probes superposition --option layers=3,15 --option top=30 --tokens 20000 --out runs/sup
  attnlab reproduce probes --out runs/probes-claims  # also the sink's position check (first token replaced)

Writes OUT/config.json, OUT/metrics.json (each probe's measurements under its name; the claims a paper
makes, measured, with their status), the probes' figures (PNG) and OUT/report.md.
An --option is typed and range-checked by the probe that takes it (one line naming the fix, before any
model is loaded). Attention patterns need eager attention: the model runs eagerly while traced and gets
its own implementation back afterwards."""


def probe_list() -> str:
    """The registered probes, one line each with its summary."""
    from attnlab.probes.base import PROBES
    from attnlab.probes.run import load_probes

    names = load_probes()
    width = max(map(len, names), default=0) + 2
    return "probes:\n" + "\n".join(f"  {n:{width}s}{PROBES.get(n).summary}" for n in names)


class _WithProbeList(HelpFormatter):
    """Puts the probe list before the epilog only when help is printed: listing the probes imports every
    probe module, which building the parser for any other `attnlab` command would otherwise pay for."""

    def add_text(self, text):
        super().add_text(probe_list() + "\n\n" + text if text == EPILOG else text)


def add_commands(sub) -> None:
    add_experiment_command(sub, "probe", ProbeRun, help="probes of a pretrained model: attention sinks, heavy "
                           "hitters, ...", description=__doc__, epilog=EPILOG, formatter_class=_WithProbeList)
