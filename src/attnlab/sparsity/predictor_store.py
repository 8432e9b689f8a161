"""Where Deja Vu's predictors are kept: saving and loading a set, the folders, and the checks on reading one.

A set (one source of one unit, :class:`~attnlab.sparsity.predictors.Predictors`) is a folder holding
``predictors.json`` (its :class:`~attnlab.sparsity.predictors.Meta`) and ``predictors.safetensors`` (its
weights), written aside and renamed into place, so no reader sees half of one. Sets live in a run folder
(``dejavu`` writes ``OUT/predictors/{own,lookahead,heads-own,heads-lookahead}``) and beside the model's
weights, ``M/predictors/<unit>-<source>-r<r>-keep<keep>/`` for the model folder M a name resolves to (an
alias: its cache folder), which ``predictors=beside`` and ``attnlab sparsity --rule predicted`` reload.

Reading a set refuses, in one line naming the fix, what it cannot use: no set there, a description that
is not JSON or not a predictors' description, weights that are damaged or do not have the shapes the
description gives (another rank), a folder named for another rank, keep, unit or source, and a set
trained for another model (layer count, widths, fingerprint of its weights).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

from torch import nn

from attnlab.core.errors import ConfigError, UsageError
from attnlab.core.io import staged_dir, write_json
from attnlab.models import arch
from attnlab.sparsity.predictors import SOURCES, UNITS, Meta, Predictors, model_fingerprint

WEIGHTS, META = "predictors.safetensors", "predictors.json"
BESIDE = "beside"  # where=BESIDE: the predictors saved beside the model's weights (see beside_folder)
RETRAIN = "train them again (attnlab reproduce dejavu) or give another predictors folder"
_NAME = re.compile(r"(?P<unit>\w+)-(?P<source>\w+)-r(?P<r>\d+)-keep(?P<keep>[0-9.e-]+)")  # beside_folder's names


def save_predictors(p: Predictors, folder: str | Path) -> Path:
    """Weights and meta into ``folder``, built in a hidden sibling and renamed: whole or not at all."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with staged_dir(folder) as stage:
        save_file({k: v.detach().contiguous() for k, v in p.state_dict().items()}, str(stage / WEIGHTS))
        write_json(stage / META, dataclasses.asdict(p.meta))
    return folder


def load_predictors(folder: str | Path, model: nn.Module) -> Predictors:
    """The set saved in ``folder`` by :func:`save_predictors`, for ``model``; UsageError (one line) for a
    damaged set, or one trained for another model."""
    folder = Path(folder)
    meta = read_meta(folder)
    dm = arch.dims(model)
    here = {"layer count": (meta.n_layers, dm.n_layers), "d": (meta.d, dm.d_model), "d_ff": (meta.d_ff, dm.d_ff),
            "model fingerprint": (meta.fingerprint, model_fingerprint(model)),
            "heads": (meta.n_heads, dm.n_heads if meta.unit == "heads" else 0)}
    bad = [f"{k} {a} (saved) vs {b} (this model)" for k, (a, b) in here.items() if a != b]
    if bad:
        raise UsageError(f"predictors in {folder} were trained for another model ({meta.model}): {'; '.join(bad)}; "
                         "train them on this one")
    weights = _read_weights(folder, meta)
    p = Predictors(meta)
    p.load_state_dict(weights)
    return p.eval()


def read_meta(folder: Path) -> Meta:
    """The description in ``folder/predictors.json``, checked field by field (and against the folder's name)."""
    path = folder / META
    if not path.is_file():
        raise UsageError(f"{folder}: no {META} here; train predictors first (attnlab reproduce dejavu)")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path} is not JSON ({getattr(e, 'msg', e)}): the predictors there are damaged; "
                         f"{RETRAIN}") from None
    problem = _meta_problem(raw)
    if problem:
        raise UsageError(f"{path} does not describe predictors ({problem}): {RETRAIN}")
    meta = Meta(**{**raw, "layers": tuple(raw["layers"])})
    named = _NAME.fullmatch(folder.name)
    if named:  # a folder beside the model: its name says what it holds
        want = {"unit": meta.unit, "source": meta.source, "r": str(meta.r), "keep": f"{meta.keep:g}"}
        wrong = [f"{k} {named[k]} (name) vs {v} (saved)" for k, v in want.items() if named[k] != v]
        if wrong:
            raise UsageError(f"{folder} is named for other predictors than it holds ({'; '.join(wrong)}): {RETRAIN}")
    return meta


def _meta_problem(raw) -> str | None:
    """What makes ``raw`` (parsed JSON) no predictors' description, or None."""
    if not isinstance(raw, dict):
        return f"a JSON {type(raw).__name__}, not an object"
    fields = {f.name: f for f in dataclasses.fields(Meta)}
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in raw]
    if missing or set(raw) - set(fields):
        return (f"missing {', '.join(missing)}" if missing
                else f"unknown keys {', '.join(sorted(set(raw) - set(fields)))}")
    ints = ("n_layers", "d", "d_ff", "r", "n_heads")
    if any(type(raw.get(k, 0)) is not int or raw.get(k, 0) < (0 if k == "n_heads" else 1) for k in ints):
        return "n_layers, d, d_ff and r must be positive integers"
    if not (type(raw["keep"]) in (int, float) and 0 < raw["keep"] <= 1 and math.isfinite(raw["keep"])):
        return f"keep {raw['keep']!r} is not in (0, 1]"
    if raw["source"] not in SOURCES or raw.get("unit", "neurons") not in UNITS:
        return f"source {raw['source']!r} of unit {raw.get('unit', 'neurons')!r}"
    layers = raw["layers"]
    if not (isinstance(layers, list) and layers and all(type(i) is int and 0 <= i < raw["n_layers"] for i in layers)
            and len(set(layers)) == len(layers)):
        return f"layers must be distinct layer indices below n_layers {raw['n_layers']}"
    if not all(isinstance(raw[k], str) for k in ("model", "fingerprint")):
        return "model and fingerprint must be strings"
    return None


def _read_weights(folder: Path, meta: Meta) -> dict:
    """The weights in ``folder``, refused unless they are exactly the tensors ``meta`` describes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / WEIGHTS
    if not path.is_file():
        raise UsageError(f"{path} is missing: the predictors there are incomplete; {RETRAIN}")
    try:
        weights = load_file(str(path))
    except (SafetensorError, OSError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
        raise UsageError(f"{path} cannot be read ({why}): the predictors there are damaged; {RETRAIN}") from None
    p, d, r, n = len(meta.layers), meta.d, meta.r, meta.width
    want = {"w1": (p, d, r), "w2": (p, r, n), "b2": (p, n)}
    got = {k: tuple(v.shape)
           for k, v in sorted(weights.items(), key=lambda kv: list(want).index(kv[0]) if kv[0] in want else len(want))}
    if got != want or any(not v.is_floating_point() for v in weights.values()):
        shapes = ", ".join(f"{k} {s}" for k, s in got.items()) or "no tensors"
        raise UsageError(f"{path} holds {shapes}, not the rank-{r} predictors {META} describes "
                         f"({', '.join(f'{k} {s}' for k, s in want.items())}): {RETRAIN}")
    return weights


# --------------------------------------------------------------------------- beside the model's weights
def model_folder(name: str) -> Path | None:
    """The folder the model ``name`` loads from (an alias: its cache folder); None for a hub id (no folder)."""
    from attnlab.models.pretrained import resolve_model

    target = resolve_model(name)
    return target if isinstance(target, Path) else None


def beside_folder(name: str, unit: str, source: str, r: int, keep: float) -> Path:
    """``M/predictors/<unit>-<source>-r<r>-keep<keep>``: where the predictors of model ``name`` are kept."""
    folder = model_folder(name)
    if folder is None:
        raise ConfigError(f"model {name} is a hub id, not a folder: no predictors are kept beside it; give a "
                          "model folder, or a predictors folder saved by `attnlab reproduce dejavu`")
    return folder / "predictors" / f"{unit}-{source}-r{r}-keep{keep:g}"


def save_beside(p: Predictors, name: str) -> Path | None:
    """Also save ``p`` beside the weights of model ``name``; a one-line warning (and None) where that
    folder cannot be written (a read-only cache, a hub id): the run folder's copy is still there."""
    m = p.meta
    try:
        return save_predictors(p, beside_folder(name, m.unit, m.source, m.r, m.keep))
    except (OSError, UsageError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"attnlab: warning: predictors not saved beside model {name} ({why}); the run folder keeps "
              "them", file=sys.stderr)
        return None


def find_beside(name: str, unit: str, source: str, keep: float, r: int | None = None) -> Path:
    """The saved predictors beside model ``name`` for ``unit``, ``source`` and ``keep`` (and rank ``r``;
    None: the one rank saved there); ConfigError, one line naming the fix, when there are none or several."""
    if r is not None:
        found = [beside_folder(name, unit, source, r, keep)]
    else:
        parent = beside_folder(name, unit, source, 0, keep).parent
        found = sorted((f for f in parent.glob(f"{unit}-{source}-r*-keep{keep:g}") if _rank(f).isdigit()),
                       key=lambda f: int(_rank(f)))
    found = [f for f in found if (f / META).is_file()]
    if not found:
        rank = "" if r is None else f" --set rank={r}"
        raise ConfigError(f"no {unit} predictors ({source}, keep {keep:g}{'' if r is None else f', r {r}'}) "
                          f"beside model {name}: train them first with `attnlab reproduce dejavu --set model={name}"
                          f"{rank} --set {'keep' if unit == 'neurons' else 'heads_keep'}={keep:g}`")
    if len(found) > 1:
        raise ConfigError(f"predictors of ranks {', '.join(_rank(f) for f in found)} are saved beside model {name} "
                          f"for keep {keep:g}: choose one (--predictor-rank R)")
    return found[0]


def _rank(folder: Path) -> str:  # "neurons-own-r128-keep0.5" -> "128"
    return folder.name.rsplit("-r", 1)[1].split("-keep")[0]
