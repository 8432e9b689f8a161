"""Every KV-cache policy as a method (kind ``kv``): its options are the policy's own fields (``budget``,
``n_sink``, ``recent``, and whatever a new policy declares) plus the cache's own: where kept tokens sit
(``positions``) and, with rolling positions, how long kept keys may owe their rotations (``lag_limit``).

Entered, a KV method hands ``model.generate`` an evicting cache: inside the stack, ``model.generate(...)``
without a ``past_key_values`` of its own runs through a fresh :class:`~attnlab.kv.cache.PolicyCache` of the
policy (the kvpress habit); on exit the model's own ``generate`` is back. Its handle also makes caches for
loops of one's own: ``with applied.handle("kv").cache() as cache: model(ids, past_key_values=cache)``.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass

from attnlab.core.errors import UsageError
from attnlab.experiments.command import option
from attnlab.kv.policies import POLICIES, POSITIONS, KVPolicy, make_policy
from attnlab.methods.base import METHODS, Method, derived

CACHE_OPTIONS = ("positions", "lag_limit")  # the cache's options, not the policy's

# the help and bounds of the options every policy shares; a policy's own field may carry its own option()
SHARED = {"budget": option(None, "tokens kept (256) or a share of those seen (0.2)", bounds="> 0"),
          "n_sink": option(4, "first tokens always kept (attention sinks)", bounds=">= 0"),
          "recent": option(None, "recent window kept (default: half the budget)", bounds=">= 0")}


@dataclass(frozen=True)
class KVMethod(Method):
    """Base of the KV methods: builds the policy from the method's fields and hands generate its cache."""

    kind = "kv"

    def policy(self) -> KVPolicy:
        own = {f.name: getattr(self, f.name) for f in self.options() if f.name not in CACHE_OPTIONS}
        return make_policy(self.name, **own)

    def cache(self, model):
        """A fresh :class:`~attnlab.kv.cache.PolicyCache` of this method for ``model`` (enter it: ``with``)."""
        from attnlab.kv.cache import PolicyCache  # transformers: only once a model runs

        return PolicyCache(model, self.policy(), self.positions, lag_limit=self.lag_limit)

    def check(self) -> None:
        if self.positions not in POSITIONS:
            raise UsageError(f"--method {self.name}:positions={self.positions}: choose {' or '.join(POSITIONS)}")
        self.policy()  # an impossible budget (below the sinks), a missing one: one line

    def label(self) -> str:
        b = self.budget
        head = f"{self.name} {b:.0%}" if isinstance(b, float) and b < 1 else f"{self.name} {b:g}" if b else self.name
        return self._labelled(head, "budget")

    def static_step(self) -> str | None:
        policy = self.policy()
        if not policy.needs_budget:  # full keeps every position: it is the static cache
            return None
        # an evicting cache compiles its steady step (attnlab.kv.steady) where one static graph holds it
        return policy.steady_step()

    def enter(self, model, ctx) -> "Evicting":
        return Evicting(model, self)


class Evicting:
    """Context manager: inside, ``model.generate`` runs through a fresh evicting cache unless given one."""

    def __init__(self, model, method: KVMethod):
        self.model, self.method = model, method
        self._own = None

    def cache(self):
        """A fresh :class:`~attnlab.kv.cache.PolicyCache` of this method for ``model`` (enter it: ``with
        handle.cache() as cache``)."""
        return self.method.cache(self.model)

    def __enter__(self) -> "Evicting":
        self._own = self.model.__dict__.get("generate")  # an instance's own generate (a hook's) comes back too
        generate = self.model.generate

        @functools.wraps(generate)
        def through_cache(*args, **kwargs):
            if kwargs.get("past_key_values") is not None:
                return generate(*args, **kwargs)
            with self.cache() as cache:
                return generate(*args, **{**kwargs, "past_key_values": cache})

        self.model.generate = through_cache
        return self

    def __exit__(self, *exc) -> None:
        if self._own is None:
            del self.model.generate
        else:
            self.model.generate = self._own


def _options(policy: type[KVPolicy]) -> list[tuple]:
    """The policy's own fields, each with its own default and the shared help where it declares none; then
    ``positions``."""
    hints = typing.get_type_hints(policy)
    own = [(f.name, hints[f.name], dataclasses.field(
        default=f.default, metadata=f.metadata or (SHARED[f.name].metadata if f.name in SHARED else {})))
        for f in dataclasses.fields(policy) if f.init]
    return own + [("positions", str, option("original", "where kept tokens sit: original (their stream positions, "
                                                        "as H2O's masks) or rolling (their ranks in the cache, as "
                                                        "StreamingLLM)")),
                  ("lag_limit", int, option(0, "rolling positions, a scored policy: evictions kept keys may owe their "
                                               "rotations for, paid through the query (0: rotated at each)",
                                            bounds=">= 0"))]


METHODS.provide(POLICIES, lambda name, policy: derived(KVMethod, f"{policy.__name__}Method", name, policy.about,
                                                      _options(policy)), "kv")
