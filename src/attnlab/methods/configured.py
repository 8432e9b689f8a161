"""The methods a command's config names: ``--method`` (its ``methods`` field), and, for one release more, the
older per-method flags (``--policy/--budget/--n-sink/--recent/--positions``, ``--sparsity/--keep/...``,
``--rope/--rope-factor``, ``--quant``) read as the methods they spell. A kind given by ``--method`` replaces
that kind's older flags. This is the one place those flags become methods."""
from __future__ import annotations

from typing import Any

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.experiments.config import check_fields
from attnlab.methods.base import KINDS, Method, load, parse_list
from attnlab.methods.stack import ordered


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
    get = lambda key, default=None: getattr(cfg, key, default)  # noqa: E731
    out = []
    if get("quant"):
        out.append(_build(cfg.quant, "weights", {}))
    if get("rope") not in (None, "", "none"):
        out.append(_build(cfg.rope, "rope", {"factor": float(cfg.rope_factor)}))
    if get("sparsity"):
        out.append(_build(cfg.sparsity, "mlp", {k: get(k) for k in ("keep", "calibration", "calibration_tokens",
                                                            "predictors") if get(k) is not None}))
    if get("policy"):
        out.append(_build(cfg.policy, "kv", {k: get(k) for k in ("budget", "n_sink", "recent", "positions")
                                       if hasattr(cfg, k)}))
    return out


def configured(cfg: Any, accepts: tuple[str, ...] = KINDS, why: str = "") -> list[Method]:
    """``cfg``'s methods in the stack's order: its ``--method`` list, then its older flags' methods of the
    kinds ``--method`` did not give; two of one kind in ``--method`` refused in one line, and so is a kind the
    command cannot apply (``accepts``; ``why`` says why not)."""
    given = ordered(parse_list(getattr(cfg, "methods", ())))
    if refused := [m for m in given if m.kind not in accepts]:
        raise UsageError(f"--method {refused[0].spec()}: "
                         + (why or f"this command does not apply {refused[0].kind} methods"))
    kinds = {m.kind for m in given}
    return ordered(given + [m for m in legacy(cfg) if m.kind not in kinds])

