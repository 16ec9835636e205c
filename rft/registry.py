"""Registries of pluggable parts, and the entries that describe them.

A user adds a part by writing one function and one decorator: `@REG.register("name")`. Built-in
parts that live in their own module are declared lazily by dotted path
(`REG.lazy("vllm", "rft.engines.vllm_engine:vllm_rollout_engine", requires=VLLM)`), so no module
imports another just to register it, and a part's heavy imports happen only when it is chosen.

An entry says what it needs: the optional packages it imports (checked when the config loads, with
the install command), its own load-time checks (`check`: a function of the config returning
located issues, also by dotted path), and `traits`: facts other code asks about (an engine's GPUs,
ranks, the config options it reads) instead of comparing names. Call sites look parts up by the
name found in the config (`REG.get(name)`); an unknown name raises ConfigError listing the known
names and the closest match.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rft.errors import ConfigError

T = TypeVar("T")

_UNLOADED = object()


@dataclass(frozen=True)
class Requirement:
    """An optional package an entry imports: its import name and the command that installs it."""

    package: str
    install: str

    def missing(self) -> bool:
        return importlib.util.find_spec(self.package) is None


def load_dotted(target: str) -> Any:
    """The object at `module:attribute` (or `module.attribute`), imported now."""
    module, sep, attr = target.partition(":")
    if not sep:
        module, _, attr = target.rpartition(".")
    if not module or not attr:
        raise ConfigError(f"{target!r} is not a dotted path of the form 'package.module:name'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class Entry(Generic[T]):
    """One registered part: the object (or the dotted path it is loaded from) and what it needs."""

    name: str
    target: str | None = None  # "module:attr" of a lazy entry
    requires: tuple[Requirement, ...] = ()
    check: Callable[..., list[Any]] | str | None = None
    traits: Mapping[str, Any] = field(default_factory=dict)
    _obj: Any = _UNLOADED

    def trait(self, key: str, default: Any = None) -> Any:
        return self.traits.get(key, default)

    def missing_packages(self) -> list[Requirement]:
        return [r for r in self.requires if r.missing()]

    def load(self, kind: str) -> T:
        if self._obj is _UNLOADED:
            for req in self.missing_packages():
                raise ConfigError(
                    f"{kind} {self.name!r} needs the {req.package} package, which is not "
                    f"installed: {req.install}"
                )
            assert self.target is not None
            self._obj = load_dotted(self.target)
        obj: T = self._obj
        return obj

    def issues(self, *args: Any) -> list[Any]:
        """The entry's own load-time checks (an empty list when it has none). Its registry's
        users say what a check is given: the config, or the config section that chose it."""
        if self.check is None:
            return []
        check = load_dotted(self.check) if isinstance(self.check, str) else self.check
        return list(check(*args))

    def describe(self) -> str:
        if self.target is not None:
            return self.target
        return _describe(self._obj)


class Registry(Generic[T]):
    """Maps names to entries of one kind of part (usually functions or classes).

    `kind` names the registry in error messages, ideally as the config key that selects from it
    (e.g. "advantage_fn"), so the user sees which key held the bad name.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self,
        name: str,
        *,
        replace: bool = False,
        requires: Iterable[Requirement] = (),
        check: Callable[..., list[Any]] | str | None = None,
        **traits: Any,
    ) -> Callable[[T], T]:
        """Decorator adding the decorated object under `name`; it returns the object unchanged.

        Registering a taken name raises ConfigError unless `replace=True`, so two plug-ins cannot
        silently shadow each other.
        """
        self._valid_name(name)

        def decorate(obj: T) -> T:
            entry: Entry[T] = Entry(name, None, tuple(requires), check, dict(traits), obj)
            self._put(entry, replace)
            return obj

        return decorate

    def add(self, name: str, obj: T, *, replace: bool = False, **traits: Any) -> None:
        """Register `obj` under `name` without decorator syntax."""
        self.register(name, replace=replace, **traits)(obj)

    def lazy(
        self,
        name: str,
        target: str,
        *,
        replace: bool = False,
        requires: Iterable[Requirement] = (),
        check: Callable[..., list[Any]] | str | None = None,
        **traits: Any,
    ) -> None:
        """Declare the part at dotted path `target` ("package.module:name") under `name`; it is
        imported on the first `get`, after its `requires` packages are found installed."""
        self._valid_name(name)
        self._put(Entry(name, target, tuple(requires), check, dict(traits)), replace)

    def _valid_name(self, name: object) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{self.kind}: registry names must be non-empty strings, got {name!r}"
            )

    def _put(self, entry: Entry[T], replace: bool) -> None:
        old = self._entries.get(entry.name)
        lazy = old is not None and old.target is not None and entry.target is None
        if lazy and old is not None and _dotted(entry._obj) == _dotted_target(str(old.target)):
            old._obj = entry._obj  # the lazy entry's own module registering its object
            return
        same = old is not None and (
            (entry.target is not None and old.target == entry.target)
            or (entry.target is None and old._obj is entry._obj)
        )
        if old is not None and not replace and not same:
            raise ConfigError(
                f"{self.kind}: name {entry.name!r} is already registered to "
                f"{old.describe()}; pass replace=True to override it"
            )
        self._entries[entry.name] = entry

    def entry(self, name: str, *, key: str | None = None) -> Entry[T]:
        """The entry registered under `name` (nothing imported), or ConfigError naming the known
        ones. `key` names the config key that held `name` when it is not the registry's kind
        (one registry may serve several keys, e.g. kl_loss_fn and kl_penalty_fn)."""
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

    def get(self, name: str, *, key: str | None = None) -> T:
        """The object registered under `name`, imported now if it was declared lazily."""
        return self.entry(name, key=key).load(key or self.kind)

    def trait(self, name: str, trait: str, default: Any = None) -> Any:
        """What entry `name` declares about `trait` (`default` when it declares nothing)."""
        return self.entry(name).trait(trait, default)

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


def _dotted(obj: object) -> str:
    return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"


def _dotted_target(target: str) -> str:
    module, sep, attr = target.partition(":")
    return target if sep else ":".join(target.rsplit(".", 1))


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


def argument_issues(
    path: str, fn: Callable[..., Any], args: Iterable[str], fixed: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """(key, problem) for each of `args` that `fn` does not accept, keyed under `path`."""
    unknown, accepted = unknown_arguments(fn, args, fixed)
    return [
        (
            f"{path}.{name}",
            f"is not an argument of {getattr(fn, '__name__', fn)} "
            f"(accepts: {', '.join(accepted) or 'nothing'})",
        )
        for name in unknown
    ]
