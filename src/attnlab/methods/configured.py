"""The methods a command's config names: ``--method`` (its ``methods`` field), and, for one release more, the
older per-method flags (``--policy/--budget/--n-sink/--recent/--positions``, ``--sparsity/--keep/...``,
``--rope/--rope-factor``) read as the methods they spell. A kind given by ``--method`` replaces that kind's
older flags. (``--quant`` is already an alias its configs resolve into ``methods``:
:class:`attnlab.experiments.command.Alias`.)"""
from __future__ import annotations

import dataclasses
from typing import Any

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.experiments.config import check_fields
from attnlab.methods.base import KINDS, Context, Method, load, parse_list
from attnlab.methods.stack import apply, ordered


def methods_option() -> Any:
    """The ``methods`` config field: ``--method NAME[:key=value,...]``, repeatable; ``--set methods="a;b"``."""
    return option((), "a method to apply while it runs, NAME[:key=value,...]; repeat it to compose methods of "
                  "different kinds (`attnlab methods` lists them and their options)", flag="--method",
                  metavar="NAME[:KEY=VALUE,...]", repeat=True, separator=";")


def _build(name: str, kind: str, values: dict[str, Any]) -> Method:
    cls = load().get(name, kind)
    known = {f.name for f in cls.options()}
    method = cls(**{k: v for k, v in values.items() if k in known})
    check_fields(method)  # the bounds the options declare, as --method's parser checks them
    method.check()
    return method


def legacy(cfg: Any) -> list[Method]:
    """The methods ``cfg``'s older per-method fields spell (those it has; none set, none)."""
    fields = {f.name for f in dataclasses.fields(cfg)}  # fields only: H2OConfig.policy is a method, say
    get = lambda key, default=None: getattr(cfg, key) if key in fields else default  # noqa: E731
    out = []
    if get("rope") not in (None, "", "none"):
        out.append(_build(cfg.rope, "rope", {"factor": float(cfg.rope_factor)}))
    if get("sparsity"):
        out.append(_build(cfg.sparsity, "mlp", {k: get(k) for k in ("keep", "calibration", "calibration_tokens",
                                                            "predictors") if get(k) is not None}))
    if get("policy"):
        out.append(_build(cfg.policy, "kv", {k: get(k) for k in ("budget", "n_sink", "recent", "positions")
                                       if k in fields}))
    return out


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
    kinds = {m.kind for m in given}
    return ordered(given + [m for m in legacy(cfg) if m.kind not in kinds])



NOT_KV = tuple(k for k in KINDS if k != "kv")


def enter_configured(cfg: Any, model, tokenizer, ctx) -> list[Method]:
    """Enter ``cfg``'s methods (:func:`configured`) on ``model`` for the rest of the run: ``ctx`` (the run's
    context) holds the stack open and the runner exits it, restoring the model. The methods, in their order."""
    methods = configured(cfg)
    if methods:
        device = str(next(model.parameters()).device)
        ctx.hold(apply(model, *methods, ctx=Context(tokenizer, device, None, str(getattr(cfg, "model", "")))))
    return methods
