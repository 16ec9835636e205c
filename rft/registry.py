"""A name -> callable registry for pluggable parts (advantage fns, losses, workflows, rewards...).

A user adds a part by writing one function and one decorator: `@REG.register("name")`. Call sites
look parts up by the name found in the config (`REG.get(name)`); an unknown name raises ConfigError
listing the known names and the closest match.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from rft.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to registered objects (usually functions or classes) of one kind.

    `kind` names the registry in error messages, ideally as the config key that selects from it
    (e.g. "advantage_fn"), so the user sees which key held the bad name.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """Decorator adding the decorated object under `name`; it returns the object unchanged.

        Registering a taken name raises ConfigError unless `replace=True`, so two plug-ins cannot
        silently shadow each other.
        """
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{self.kind}: registry names must be non-empty strings, got {name!r}"
            )

        def decorate(obj: T) -> T:
            self.add(name, obj, replace=replace)
            return obj

        return decorate

    def add(self, name: str, obj: T, *, replace: bool = False) -> None:
        """Register `obj` under `name` without decorator syntax."""
        if name in self._entries and not replace and self._entries[name] is not obj:
            raise ConfigError(
                f"{self.kind}: name {name!r} is already registered to "
                f"{_describe(self._entries[name])}; pass replace=True to override it"
            )
        self._entries[name] = obj

    def get(self, name: str, *, key: str | None = None) -> T:
        """Return the object registered under `name`, or raise ConfigError naming the known ones.

        `key` names the config key that held `name` when it is not the registry's own kind
        (one registry may serve several keys, e.g. kl_loss_fn and kl_penalty_fn).
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            pass
        known = self.names()
        hint = ""
        if isinstance(name, str):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            if close:
                hint = f"; did you mean {close[0]!r}?"
        raise ConfigError(
            f"unknown {key or self.kind} {name!r}{hint} (known: {', '.join(known) or 'none'})"
        )

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"


def _describe(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module and qualname:
        return f"{module}.{qualname}"
    return repr(obj)


def unknown_arguments(
    fn: Callable[..., Any], names: Iterable[str], fixed: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """(names `fn` does not accept as keywords, the names it does accept beyond `fixed`).

    Parts take their configurable args as keywords after fixed positional inputs; a part with
    **kwargs accepts anything.
    """
    params = inspect.signature(fn).parameters
    accepted = sorted(n for n in params if n not in fixed)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return [], accepted
    return [n for n in names if n not in accepted], accepted
