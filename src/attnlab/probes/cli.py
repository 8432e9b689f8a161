"""``attnlab probe``: stream a text through a model with a chosen set of probes (attention sinks, heavy
hitters, ...) and write what each measured, the papers' claims it checks, and its figures. The model
runs in chunks with its own KV cache, so a chunk attends to the whole prefix while only one layer's
attention pattern for one chunk is held at a time."""
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
  attnlab probe --out runs/probes                    # every probe, SmolLM2, 2,048 tokens of WikiText-2 test
  attnlab probe --probes sinks --tokens 8192 --out runs/sinks8k
  attnlab probe --probes sinks,heavy-hitters --text war-and-peace --tokens 16384 --chunk 512 --out runs/wp
  attnlab probe --model runs/llama/model --probes sinks --text kjv --out runs/own-sinks
  attnlab probe --probes superposition --option layers=3,15 --option top=30 --tokens 20000 --out runs/sup
  attnlab reproduce probes --out runs/probes-claims  # also the sink's position check (first token replaced)

Writes OUT/config.json, OUT/metrics.json (each probe's measurements under its name; the claims a paper
makes, measured, with their status), the probes' figures (PNG) and OUT/report.md.
Attention patterns need eager attention: the model runs eagerly while traced and gets its own
implementation back afterwards."""


@dataclass(frozen=True)
class ProbeRun:
    """One ``attnlab probe`` run: its flags, as the run's config."""

    model: str = "smollm2"
    probes: tuple[str, ...] = ()  # (): every registered probe
    text: str = "wikitext-2/test.txt"
    tokens: int = 2048
    chunk: int = 512
    options: tuple[str, ...] = ()  # "key=value" for the chosen probes' constructors (--option)

    def __post_init__(self):
        from attnlab.probes.experiments import chosen

        if self.tokens < 2:
            raise UsageError(f"--tokens {self.tokens}: give at least 2 tokens")
        if self.chunk < 1:
            raise UsageError(f"--chunk {self.chunk}: give at least 1 token per forward")
        object.__setattr__(self, "probes", chosen(self.probes))  # (): every probe, named in config.json
        probe_options(self.options, self.probes)  # an unknown key or a bad value: one line, before any work


def _value(text: str):
    """'7' -> 7, '0.3' -> 0.3, '7,14,22' -> (7, 14, 22), 'none' -> None, else the string."""
    if text.lower() == "none":
        return None
    if "," in text:
        return tuple(_value(t.strip()) for t in text.split(",") if t.strip())
    for typ in (int, float):
        try:
            return typ(text)
        except ValueError:
            pass
    return text


def probe_options(texts: tuple[str, ...], names: tuple[str, ...]) -> dict:
    """``--option key=value`` strings -> {key: value}; UsageError for a malformed one or a key that no
    chosen probe's constructor takes (naming the keys they do take)."""
    import inspect

    from attnlab.probes.base import PROBES

    params = [p for n in names for p in inspect.signature(PROBES.get(n)).parameters.values()]
    takes = {p.name for p in params}
    many = {p.name for p in params if any(w in str(p.annotation) for w in ("Sequence", "tuple", "list"))}
    out = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option {text!r}: give key=value, e.g. --option layers=7,14,22")
        if key.strip() not in takes:
            raise UsageError(f"--option {key.strip()}: no chosen probe ({', '.join(names)}) takes it; they take "
                             f"{', '.join(sorted(takes - {'decode'}))}")
        v = _value(value.strip())
        out[key.strip()] = (v,) if key.strip() in many and not isinstance(v, tuple) and v is not None else v
    return out


def run_probe(cfg: ProbeRun, ctx) -> Result:
    """Load the model and text, stream them once with the chosen probes."""
    from attnlab.evals.inputs import load_model, text_ids
    from attnlab.probes.experiments import run_probes

    model, tok = load_model(cfg.model, ctx.device)
    ids = text_ids(tok, cfg.text, cfg.tokens, "--text PATH")
    metrics, claims, figures = run_probes(model, ids, cfg.probes, cfg.chunk, ctx, tok.decode,
                                          options=probe_options(cfg.options, cfg.probes))
    summary = (f"{cfg.model} on the first {ids.numel()} tokens of {cfg.text} in chunks of {cfg.chunk} with the "
               f"model's KV cache (full causal attention over the prefix); probes: {', '.join(cfg.probes)}.")
    return Result(claims, {"command": ctx.command, "model": cfg.model, "text": cfg.text, "tokens": int(ids.numel()),
                           "chunk": cfg.chunk, "probes": list(cfg.probes), **metrics}, figures, summary)


PROBE = Experiment("probe", "probes on a model and a text: sinks, heavy hitters, ...", ProbeRun, run_probe)


def probe_list() -> str:
    """The registered probes, one line each with its summary."""
    from attnlab.probes.base import PROBES
    from attnlab.probes.experiments import load_probes

    names = load_probes()
    width = max(map(len, names), default=0) + 2
    return "probes:\n" + "\n".join(f"  {n:{width}s}{PROBES.get(n).summary}" for n in names)


class _WithProbeList(argparse.RawDescriptionHelpFormatter):
    """Puts the probe list before the epilog only when help is printed: listing the probes imports every
    probe module, which building the parser for any other `attnlab` command would otherwise pay for."""

    def add_text(self, text):
        super().add_text(probe_list() + "\n\n" + text if text == EPILOG else text)


def add_commands(sub) -> None:
    p = sub.add_parser("probe", help="probes of a pretrained model: attention sinks, heavy hitters, ...",
                       description=__doc__, epilog=EPILOG, formatter_class=_WithProbeList)
    p.add_argument("--probes", default="", metavar="NAMES",
                   help="comma-separated probe names (default: every probe listed below)")
    p.add_argument("--model", default=ProbeRun.model, help="alias (smollm2), model folder, attnlab train run or hub id")
    p.add_argument("--text", default=ProbeRun.text, help="a file, or wikitext-2/test.txt / kjv / war-and-peace")
    p.add_argument("--tokens", type=int, default=ProbeRun.tokens, help="tokens of the text to stream (default 2048)")
    p.add_argument("--chunk", type=int, default=ProbeRun.chunk,
                   help="tokens per forward; each attends to everything before it (default 512)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the chosen probes' constructors, repeatable: layers=7,14,22 "
                        "(superposition), first=4, eps=0.3 (sinks), heavy=64 (heavy-hitters), ...")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.set_defaults(func=cmd_probe)


def cmd_probe(args) -> int:
    from attnlab.experiments.runner import check_device, command_line, run_into
    from attnlab.probes.experiments import claim_lines

    names = tuple(n.strip() for n in args.probes.split(",") if n.strip())
    cfg = ProbeRun(args.model, names, args.text, args.tokens, args.chunk, tuple(args.option))
    result = run_into(PROBE, cfg, args.out, check_device(args.device), command_line(args.argv))
    for line in claim_lines(result.claims) or ["no probe chosen makes a claim: see metrics.json"]:
        print(line)
    figures = ", ".join(f"{args.out}/{f}" for f in result.figures)
    print(f"results: {args.out}/metrics.json, {args.out}/report.md" + (f", {figures}" if figures else ""),
          file=sys.stderr)
    return 0
