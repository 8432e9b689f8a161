"""The methods a command's config names: ``--method`` (its ``methods`` field) and the command's own default
ones (stream's sinks cache), in the stack's order; and, for one release more, the older per-method flags
(``--policy/--budget/--n-sink/--recent/--positions``, ``--sparsity/--keep/...``, ``--rope/--rope-factor``,
``--quant``) as aliases (:func:`older`) that the config resolves into the ``methods`` they spell, saying the new
spelling. A kind given by ``--method`` wins over that kind's older flags. No config holds a per-method field."""
from __future__ import annotations

from typing import Any

from attnlab.core.errors import UsageError
from attnlab.experiments.command import Alias, option
from attnlab.experiments.config import resolve
from attnlab.methods.base import KINDS, Context, Method, load, parse, parse_list
from attnlab.methods.stack import apply, ordered


def methods_option() -> Any:
    """The ``methods`` config field: ``--method NAME[:key=value,...]``, repeatable; ``--set methods="a;b"``."""
    return option((), "a method to apply while it runs, NAME[:key=value,...]; repeat it to compose methods of "
                  "different kinds (`attnlab methods` lists them and their options)", flag="--method",
                  metavar="NAME[:KEY=VALUE,...]", repeat=True, separator=";")


def older(kind: str, name_key: str, flags: dict, defaults: dict[str, str] | None = None, default_name: str = "",
          rename: dict[str, str] | None = None) -> Alias:
    """A command's older flags of one kind of method, as an :class:`~attnlab.experiments.command.Alias`:
    ``name_key`` names the method (``--policy``), the other keys of ``flags`` its options (``--budget``;
    ``rename`` maps a key to its option's name, ``rope_factor`` to ``factor``), ``defaults`` the command's own
    defaults for them. Without ``name_key`` given the method is ``default_name``'s ("": none); an option the
    method does not take is left out, as the older flags were (``--recent`` with ``--policy sinks``); a
    ``--method`` of the same kind wins."""
    def spec(given: dict[str, str], explicit: tuple[str, ...], spelled) -> str:
        name = given.get(name_key, default_name)
        methods = load()
        if any(methods.get(s.partition(":")[0].strip()).kind == kind for s in explicit):
            return ""
        if name in ("", "none"):
            _without_a_name(kind, name_key, {k: v for k, v in given.items() if k != name_key}, rename or {}, spelled,
                            refuse=name == "")
            return ""
        cls = methods.get(name, kind)
        takes = {f.name for f in cls.options()}
        values = dict(defaults or {})
        for key, text in given.items():
            option = (rename or {}).get(key, key)
            if key != name_key and option in takes:
                _check_option(cls, option, key, text, spelled)
                values[option] = text
        kept = [f"{k}={v}" for k, v in values.items() if k in takes]
        return name + (":" + ",".join(kept) if kept else "")
    return Alias(spec, flags)


def _check_option(cls: type[Method], option: str, key: str, text: str, spelled) -> None:
    """``text`` as the method option ``option`` (its type and bounds), refused as the user spelled it (``key``)."""
    resolve(cls, {option: text}, spelled=lambda _k, _t: spelled(key, text))


def _without_a_name(kind: str, name_key: str, given: dict[str, str], rename: dict[str, str], spelled,
                    refuse: bool) -> None:
    """Options given without the flag that names their method: each still checked (a NaN is one line whatever
    else is missing), then, where no method of the kind is meant (``refuse``), refused in one line."""
    for key, text in given.items():
        option = rename.get(key, key)
        cls = next((c for _, c in load().items() if c.kind == kind and option in {f.name for f in c.options()}), None)
        if cls is not None:
            _check_option(cls, option, key, text, spelled)
    if refuse and given:
        key, text = next(iter(given.items()))
        flag = "--" + name_key.replace("_", "-")
        raise UsageError(f"{spelled(key, text)} names no method: give {flag} with it, or --method "
                         f"NAME:{rename.get(key, key)}={text}")


def configured(cfg: Any, accepts: tuple[str, ...] | None = None, why: str | None = None) -> list[Method]:
    """``cfg``'s methods in the stack's order: its ``--method`` list, then its older flags' methods of the
    kinds ``--method`` did not give; two of one kind in ``--method`` refused in one line, and so is a kind the
    command cannot apply (``accepts``; ``why`` says why not; by default the config class's ``METHOD_KINDS`` and
    ``METHOD_WHY``, else every kind)."""
    accepts = accepts or getattr(cfg, "METHOD_KINDS", KINDS)
    why = why or getattr(cfg, "METHOD_WHY", "")
    given = ordered(parse_list(getattr(cfg, "methods", ())))
    if refused := [m for m in given if m.kind not in accepts]:
        raise UsageError(f"--method {refused[0].spec()}: "
                         + (why or f"this command does not apply {refused[0].kind} methods"))
    defaults = [parse(s) for s in getattr(cfg, "DEFAULT_METHODS", ())]  # a command's own: stream's sinks cache
    kinds = {m.kind for m in given}
    return ordered(given + [m for m in defaults if m.kind not in kinds])


NOT_KV = tuple(k for k in KINDS if k != "kv")
# the kinds a command applies under what it compares itself (its KV caches and MLP rules): the model's weights
# and positions
WEIGHTS_AND_ROPE = ("weights", "rope")


def enter_configured(cfg: Any, model, tokenizer, ctx) -> list[Method]:
    """Enter ``cfg``'s methods (:func:`configured`) on ``model`` for the rest of the run: ``ctx`` (the run's
    context) holds the stack open and the runner exits it, restoring the model. The methods, in their order."""
    methods = configured(cfg)
    if methods:
        device = str(next(model.parameters()).device)
        ctx.hold(apply(model, *methods, ctx=Context(tokenizer, device, None, str(getattr(cfg, "model", "")))))
    return methods


def _names(registry: str):
    def names() -> list[str]:
        return [n for n, m in load().items() if m.kind == registry]
    return names


KV_FLAGS = {"policy": ("KV-cache policy: {choices}", "POLICY", _names("kv")),
            "budget": ("tokens kept (256) or a share of those seen (0.2)", "BUDGET", None),
            "n_sink": ("attention sinks kept by the policies that keep sinks", "N_SINK", None),
            "recent": ("recent window of the h2o policies (default: half the budget)", "RECENT", None),
            "positions": ("positions of kept tokens: rolling (inside the cache) or original", "POSITIONS", None)}
SPARSITY_FLAGS = {"sparsity": ("contextual-sparsity rule on the MLPs: {choices}", "RULE", _names("mlp")),
                  "keep": ("share of MLP neurons kept per token, in (0, 1]", "KEEP", None),
                  "calibration": ("calibration text of the rules built from one", "CALIBRATION", None),
                  "calibration_tokens": ("calibration tokens", "N", None),
                  "predictors": ("a dejavu run's predictors folder (default: beside the model)", "DIR", None)}
ROPE_FLAGS = {"rope": ("RoPE scaling applied while it runs: {choices}", "SCALING", _names("rope")),
              "rope_factor": ("the scaling's factor (trained window x factor)", "FACTOR", None)}
QUANT = older("weights", "quant", {"quant": ("quantize the weights while it runs: {choices}", "SCHEME",
                                            _names("weights"))})
