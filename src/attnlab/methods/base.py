"""A method: one object of one protocol, whatever it changes in a model.

Every KV-cache policy, contextual-sparsity rule, RoPE scaling and weight scheme is a :class:`Method`: a
frozen dataclass whose fields are its options (``option(default, help, bounds=...)``, so ``--method`` and
``--set`` read them with one parser and one set of checks), with a ``name``, a ``kind`` and ``enter(model,
ctx)``, which returns a context manager that changes the model inside and restores it on exit. The kinds
are entered in one order (:data:`KINDS`), by one stack (:mod:`attnlab.methods.stack`); a capability
registers its methods in its own ``methods`` module (``attnlab/<capability>/methods.py``), found by
:func:`load` without a list to keep. Torch-free: naming, parsing and checking a method imports no model code.

A method is written ``NAME[:key=value,...]`` (``h2o:budget=0.2,recent=64``, ``int8``); several are joined
with ``;`` (``--set methods="int8;h2o:budget=0.2"``).
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from attnlab.core.errors import UsageError
from attnlab.core.registry import Registry
from attnlab.experiments.command import option
from attnlab.experiments.config import did_you_mean, resolve

# The stack's one order. Weights first: a sparse MLP entered inside gathers the quantized rows. RoPE before
# the cache: rolling positions re-rotate kept keys with the model's frequencies as scaled. The KV cache last:
# it hands generate a cache that runs the model as the methods before it left it.
KINDS = ("weights", "rope", "mlp", "kv")
KIND_NAMES = {"weights": "weight scheme", "rope": "RoPE scaling", "mlp": "contextual-sparsity rule",
              "kv": "KV-cache policy"}


@dataclass
class Context:
    """What entering a method may read besides the model: its tokenizer (to encode a calibration text), the
    device, a progress bar (``update(n)``) that calibration passes advance (or None), and the name the model
    was loaded by (where saved predictors are looked up)."""

    tokenizer: Any = None
    device: str = "cpu"
    progress: Any = None
    model_name: str = ""


# what a calibrated method or experiment reads unless told otherwise: a split no evaluation scores
CALIBRATION_TEXT, CALIBRATION_TOKENS = "wikitext-2/valid.txt", 2048
# the options of every method that calibrates on a text (a sparsity rule's thresholds, SmoothQuant's maxima);
# attnlab.evals.inputs.calibration_ids reads them
CALIBRATION = [("calibration", str, option(CALIBRATION_TEXT, "the text the method calibrates on (never the "
                                                             "evaluation text)")),
               ("calibration_tokens", int, option(CALIBRATION_TOKENS, "calibration tokens", bounds=">= 1"))]


@dataclass(frozen=True)
class Method:
    """Base of every method: subclasses are frozen dataclasses whose fields are the method's options."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""  # one of KINDS
    about: ClassVar[str] = ""  # one line of help: what the method keeps or changes

    def check(self) -> None:
        """Refuse options that cannot run together (one line, UsageError); the fields' bounds are checked by
        the parser. Called before any model loads."""

    def enter(self, model, ctx: Context) -> AbstractContextManager:
        """A context manager: inside it ``model`` runs with this method; on exit it is as it was, bit for bit."""
        raise NotImplementedError

    def static_step(self) -> str | None:
        """Why a decode step compiled once (a static graph and a static cache of every position:
        ``attnlab.models.compiled``) cannot run under this method, or None where it can and writes the eager
        logits. Read by :func:`refuse_uncompilable`, the one rule every ``--compile`` follows."""
        return None

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.init]

    def spec(self) -> str:
        """How this method is written: its name, and each option that differs from its default."""
        given = self.changed()
        return self.name + (":" + ",".join(f"{k}={v}" for k, v in given.items()) if given else "")

    def changed(self, *leave: str) -> dict[str, str]:
        """Each option that differs from its default (but those named in ``leave``), as written."""
        default = type(self)()
        return {f.name: _text(getattr(self, f.name)) for f in self.options()
                if f.name not in leave and getattr(self, f.name) != getattr(default, f.name)}

    def label(self) -> str:
        """The method as a table's row reads it ("h2o 20%", "cats keep 0.5", "yarn x2"; by default its spec)."""
        return self.spec()

    def _labelled(self, head: str, *shown: str) -> str:
        rest = self.changed(*shown)
        return head + (f" ({', '.join(f'{k}={v}' for k, v in rest.items())})" if rest else "")


def _text(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


class MethodRegistry:
    """The methods by name, read through each capability's own registry (``POLICIES``, ``RULES``, ``SCALINGS``,
    ``SCHEMES``): a name registered there is a method at once, with no list here to keep. Each capability's
    ``methods`` module calls :meth:`provide` with its registry and how an entry becomes a Method class;
    :func:`register` adds a Method class written as one. Reads as a :class:`~attnlab.core.registry.Registry`
    does (``get`` with a did-you-mean, ``names``, ``items``, ``in``)."""

    def __init__(self):
        self._providers: list[tuple[Registry, Callable[[str, Any], type[Method]], str]] = []
        self._own: Registry[type[Method]] = Registry("method")
        self._made: dict[tuple[str, int], type[Method] | None] = {}

    def provide(self, registry: Registry, make: Callable[[str, Any], type[Method] | None], kind: str) -> None:
        """``registry``'s entries are methods of ``kind``, each class made by ``make(name, entry)`` (None: that
        entry is no method)."""
        self._providers.append((registry, make, kind))

    def add(self, cls: type[Method]) -> type[Method]:
        return self._own.add(cls.name, cls)

    def _all(self) -> dict[str, type[Method]]:
        out: dict[str, type[Method]] = {}
        for registry, make, _ in self._providers:
            for name, item in registry.items():
                key = (name, id(item))  # made once per entry; an entry replaced (a test's) is made anew
                if key not in self._made:
                    self._made[key] = make(name, item)
                if self._made[key] is None:  # an entry that is no method (the model's own RoPE)
                    continue
                if name in out:  # "--method NAME" must mean one thing
                    raise ValueError(f"method name {name!r} is both a {out[name].kind} and a {self._made[key].kind} "
                                     "method: rename one")
                out[name] = self._made[key]
        return {**out, **dict(self._own.items())}

    def get(self, name: str, kind: str | None = None) -> type[Method]:
        """The method ``name``; with ``kind``, one of that kind, an unknown name refused in its own registry's
        words (``--quant int3``: "unknown weight quantization 'int3': did you mean 'int8'?")."""
        found = self._all()
        if kind is not None and (name not in found or found[name].kind != kind):
            for registry, _, k in self._providers:
                if k == kind and isinstance(registry, Registry):
                    registry.get(name)  # raises its own one line
        if name not in found:
            close = difflib.get_close_matches(str(name), list(found), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UsageError(f"unknown method {name!r}: {hint}`attnlab methods` lists them")
        return found[name]

    def names(self) -> list[str]:
        return list(self._all())

    def items(self):
        return self._all().items()

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self):
        return iter(self._all())


METHODS = MethodRegistry()


def refuse_uncompilable(methods: list[Method], flag: str = "--compile") -> None:
    """One line (UsageError) naming the first of ``methods`` a compiled decode step cannot run under, before
    any model loads; ``attnlab generate --compile`` and ``attnlab stream --compile`` both ask here."""
    for m in methods:
        if (why := m.static_step()) is not None:
            raise UsageError(f"{flag} {why}: drop --method {m.spec()} (or {flag})")


def register(cls: type[Method]) -> type[Method]:
    """Class decorator for a method written as a class of its own: it becomes ``METHODS[cls.name]``."""
    if cls.kind not in KINDS:
        raise ValueError(f"method {cls.name!r}: kind {cls.kind!r} is not one of {KINDS}")
    return METHODS.add(cls)


def derived(base: type[Method], cls_name: str, name: str, about: str,
            options: list[tuple[str, Any, dataclasses.Field]]) -> type[Method]:
    """A Method class for one entry of a capability's registry (a policy, scaling, rule or scheme): ``base``
    (which knows how to enter that kind) with ``options`` [(name, type, option(...))] as its fields."""
    cls = dataclasses.make_dataclass(cls_name, options, bases=(base,), frozen=True,
                                     namespace={"name": name, "about": about})
    cls.__module__ = base.__module__
    return cls


def method_modules() -> list[str]:
    """Every ``attnlab.<capability>.methods`` module: where the capabilities register their methods."""
    import attnlab

    return [info.name for info in pkgutil.iter_modules(attnlab.__path__, "attnlab.")
            if info.ispkg and importlib.util.find_spec(info.name + ".methods") is not None
            and info.name != "attnlab.methods"]


def load() -> MethodRegistry:
    """METHODS, with every capability's methods registered."""
    for package in method_modules():
        importlib.import_module(package + ".methods")
    return METHODS


def parse(text: str) -> Method:
    """``NAME[:key=value,...]`` -> the method, its options read by their types and bounds (one-line errors: an
    unknown method or option with the closest, a value out of its bounds)."""
    name, _, rest = text.strip().partition(":")
    cls = load().get(name.strip())
    given: dict[str, str] = {}
    for item in (s.strip() for s in rest.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--method {text}: write NAME:key=value,... (e.g. h2o:budget=0.2,recent=64)")
        given[key.strip()] = value.strip()
    names = [f.name for f in cls.options()]
    for key in given:
        if key not in names:
            takes = f"its options: {', '.join(names)}" if names else "it takes none"
            raise UsageError(f"--method {text}: {cls.name} has no option {key!r}; {did_you_mean(key, names)}{takes}")
    method = resolve(cls, given, spelled=lambda k, t: f"--method {cls.name}:{k}={t}")
    method.check()
    return method


def parse_list(text: str | list[str] | tuple[str, ...]) -> list[Method]:
    """Methods from ``"int8;h2o:budget=0.2"`` or a list of specs (repeated ``--method``)."""
    items = text.split(";") if isinstance(text, str) else [s for t in text for s in t.split(";")]
    return [parse(s) for s in items if s.strip()]


def describe(cls: type[Method]) -> str:
    """One method's help: name, kind, what it does, and each option with its default and help."""
    lines = [f"{cls.name} ({KIND_NAMES[cls.kind]}): {cls.about}"]
    for f in cls.options():
        shown = _text(f.default) if f.default is not dataclasses.MISSING else "required"
        lines.append(f"    {f.name}={shown}  {f.metadata.get('help', '')}".rstrip())
    return "\n".join(lines)
