"""The page: the data (:mod:`attnlab.view.pack`'s blobs and the numbers beside them) as JSON inside one HTML
file with its stylesheet and script (``static/``), nothing loaded from anywhere else."""
from __future__ import annotations

import html
import json
import re
from importlib import resources

from attnlab.view.capture import Capture
from attnlab.view.pack import bitsets, blob
from attnlab.view.replay import Replay

FORMAT = 1  # the data's layout version, read by the page's script


def page_data(tokens: list[str], ids: list[int], cap: Capture, replays: list[Replay], info: dict) -> dict:
    """Everything the page shows, as JSON-ready values and blobs. ``info``: what was run (model, text, chunk)."""
    L, H = len(cap.scale), len(cap.scale[0])
    return {
        "format": FORMAT, **info, "tokens": tokens, "ids": ids, "T": len(tokens), "layers": L, "heads": H,
        "kv_heads": cap.accumulated[0].shape[0], "n_sink": cap.n_sink,
        "attention": {"mask": cap.mask.close(), "values": cap.values.close(), "counts": cap.counts,
                      "scale": cap.scale},
        "sink": cap.sink, "entropy": cap.entropy, "first_share": cap.first_share(),
        # (L, H_kv, T) float32, little-endian
        "accumulated": blob(b"".join(a.numpy().astype("<f4").tobytes() for a in cap.accumulated)),
        "replays": [{"policy": r.policy, "budget": r.budget, "label": r.label, "ends": r.ends,
                     "kept": blob(bitsets(r.kept))} for r in replays],  # (steps, L, H_kv, ceil(T/8)) bits
    }


def _static(name: str) -> str:
    return resources.files("attnlab.view").joinpath("static", name).read_text(encoding="utf-8")


def render(data: dict) -> str:
    """The self-contained page: the template with its style, script and data inlined."""
    # "<" escaped: no token of the text can close the script element the JSON sits in
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    pieces = {"TITLE": html.escape(f"attnlab view: {data.get('model', '')}, {data['T']} tokens"),
              "CSS": _static("view.css"), "JS": _static("view.js"), "DATA": payload}
    # one pass: what is put in is never searched again (a text may spell a placeholder)
    return re.sub(r"\{\{(TITLE|DATA)\}\}|/\*(CSS|JS)\*/", lambda m: pieces[m.group(1) or m.group(2)],
                  _static("view.html"))
