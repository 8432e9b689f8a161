"""One registry for everything attnlab looks up by name (experiments, policies, scalings, probes),
with one did-you-mean."""
from __future__ import annotations

import difflib
from typing import Generic, Iterator, TypeVar

from attnlab.core.errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> items, refusing duplicates; an unknown name is one line that suggests the closest.

    ``kind`` names what is registered ("experiment"); ``hint`` says where the list is
    ("see `attnlab list`").
    """

    def __init__(self, kind: str, hint: str = ""):
        self.kind, self.hint = kind, hint
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = item
        return item

    def register(self, name: str):
        """Decorator form of :meth:`add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UsageError(self.unknown(name))
        return self._items[name]

    def unknown(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._items), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = self.hint or "one of " + ", ".join(self._items)
        return f"unknown {self.kind} {name!r}: {hint}{known}"

    def names(self) -> list[str]:
        return list(self._items)

    def items(self):
        return self._items.items()

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
