"""Corpora by Hugging Face ``datasets`` name (the adapter to the ``datasets`` library).

Specs read ``hf:NAME[/CONFIG][:SPLIT]``, e.g. ``hf:Salesforce/wikitext/wikitext-2-v1:train``
(the part after the last ``/`` that has no ``:`` is taken as the config when the name has three
parts). Needs the optional ``datasets`` package and a network; without either the error says how
to give the text as a file instead. :mod:`attnlab.data.sources` imports this module only for such
specs, and this module imports ``datasets`` only when it reads one.
"""
from __future__ import annotations

from attnlab.core.errors import UsageError, first_line


def parse_spec(spec: str) -> tuple[str, str | None, str]:
    """``hf:owner/name/config:split`` -> (owner/name, config, split); split defaults to train. (The prefix,
    whatever it is, ends at the first colon: sources.py owns it, and this module imports nothing of it.)"""
    body, _, split = spec.partition(":")[2].partition(":")
    parts = body.split("/")
    if not body or len(parts) > 3 or not all(parts):
        raise UsageError(f"{spec}: write hf:NAME, hf:OWNER/NAME or hf:OWNER/NAME/CONFIG, optionally :SPLIT")
    name, config = ("/".join(parts[:2]), parts[2]) if len(parts) == 3 else ("/".join(parts), None)
    return name, config, split or "train"


def hub_lines(spec: str) -> list[str]:
    """The ``text`` column of a hub dataset split, as lines."""
    name, config, split = parse_spec(spec)
    try:
        import datasets
    except ImportError:
        raise UsageError(f"{spec}: the datasets package is not installed; `pip install datasets`, or download "
                         "the text and give its path") from None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - offline, unknown name, bad split: all end the same way
        raise UsageError(f"{spec}: could not load it from the Hugging Face hub ({type(e).__name__}: "
                         f"{first_line(e, 'no detail')}); without a network, "
                         "download the text elsewhere and give its path") from None
    if "text" not in ds.column_names:
        raise UsageError(f"{spec}: the split has no 'text' column (columns: {', '.join(ds.column_names)})")
    return [line for row in ds["text"] for line in row.splitlines()]
