"""One registry for everything attnlab looks up by name (experiments, policies, scalings, probes),
with one did-you-mean."""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Callable, Generic, Iterator, TypeVar

from attnlab.core.errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> items, refusing duplicates; an unknown name is one line that suggests the closest.

    ``kind`` names what is registered ("experiment"); ``hint`` says where the list is
    ("see `attnlab list`"). ``discover``, if given, runs once before the registry is first read: it imports the
    modules that register themselves (a new policy is a file of its own, found, not listed).
    """

    def __init__(self, kind: str, hint: str = "", discover: Callable[[], None] | None = None):
        self.kind, self.hint = kind, hint
        self._items: dict[str, T] = {}
        self._discover = discover

    def _read(self) -> dict[str, T]:
        if self._discover is not None:
            discover, self._discover = self._discover, None  # once; its modules may read the registry
            discover()
        return self._items

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = item
        return item

    def register(self, name: str):
        """Decorator form of :meth:`add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        if name not in self._read():
            raise UsageError(self.unknown(name))
        return self._items[name]

    def unknown(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._read()), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        known = self.hint or "one of " + ", ".join(self._items)
        return f"unknown {self.kind} {name!r}: {hint}{known}"

    def names(self) -> list[str]:
        return list(self._read())

    def items(self):
        return self._read().items()

    def __contains__(self, name: object) -> bool:
        return name in self._read()

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def files(package: str, prefix: str = "") -> Callable[[], None]:
    """A ``discover`` that imports every module of ``package`` whose name starts with ``prefix``: a new item is a
    file of its own there, registered by its own decorator or ``add`` (found, not listed)."""
    def discover() -> None:
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__, package + "."):
            if info.name.rpartition(".")[2].startswith(prefix):
                importlib.import_module(info.name)
    return discover
