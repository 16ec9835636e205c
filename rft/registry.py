"""Registries of pluggable parts, and the entries that describe them.

A user adds a part by writing one function and one decorator: `@REG.register("name")`. Built-in
parts that live in their own module are declared lazily by dotted path
(`REG.lazy("vllm", "rft.engines.vllm_engine:vllm_rollout_engine", requires=VLLM)`), so no module
imports another just to register it, and a part's heavy imports happen only when it is chosen.

An entry says what it needs: the optional packages it imports (checked when the config loads, with
the install command), its own load-time checks (`check`: a function of the config returning
located issues, also by dotted path), and its spec: the facts other code asks about (an engine's
ranks, the config options it reads, whether a loss pairs rows) instead of comparing names. Each
registry declares its spec type, a frozen dataclass derived from `PartSpec`; the keywords of a
registration are that spec's fields, checked by name and type when the entry registers, so a
misspelt or mistyped trait fails at import. Readers ask `REG.spec(name).field`, which a type
checker follows. Call sites look parts up by the name found in the config (`REG.get(name)`); an
unknown name raises ConfigError listing the known names and the closest match.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic

from typing_extensions import TypeVar

from rft.errors import ConfigError


@dataclass(frozen=True)
class PartSpec:
    """What an entry declares beyond its object. A registry whose callers ask nothing of its
    entries uses this one, which has no fields; others derive a frozen dataclass from it."""


T = TypeVar("T")
S = TypeVar("S", bound=PartSpec, default=PartSpec)

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
class Entry(Generic[T, S]):
    """One registered part: the object (or the dotted path it is loaded from) and what it needs."""

    name: str
    spec: S
    target: str | None = None  # "module:attr" of a lazy entry
    requires: tuple[Requirement, ...] = ()
    check: Callable[..., list[Any]] | str | None = None
    _obj: Any = _UNLOADED

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


class Registry(Generic[T, S]):
    """Maps names to entries of one kind of part (usually functions or classes).

    `kind` names the registry in error messages, ideally as the config key that selects from it
    (e.g. "advantage_fn"), so the user sees which key held the bad name. `spec` is the type of
    what each entry declares (PartSpec, with no fields, unless given).
    """

    def __init__(
        self,
        kind: str,
        spec: type[S] = PartSpec,  # type: ignore[assignment]
        *,
        rule: Callable[..., Iterable[Any]] | str | None = None,
    ) -> None:
        self.kind = kind
        self.spec_type: type[S] = spec
        # the load-time rule every selected entry of this kind answers to, given its name, its
        # spec and what the entry's own check is given (by dotted path: it may live in a module
        # that imports this registry's)
        self.rule = rule
        self._entries: dict[str, Entry[T, S]] = {}

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
        silently shadow each other. `traits` are the fields of the registry's spec.
        """
        self._valid_name(name)
        spec = self._spec_of(name, traits)

        def decorate(obj: T) -> T:
            entry: Entry[T, S] = Entry(name, spec, None, tuple(requires), check, obj)
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
        spec = self._spec_of(name, traits)
        self._put(Entry(name, spec, target, tuple(requires), check), replace)

    def _spec_of(self, name: str, traits: Mapping[str, Any]) -> S:
        """The spec an entry's registration keywords make, or ConfigError naming the keyword
        that is not a field of the registry's spec or whose value is not of the field's type."""
        spec_type = self.spec_type
        fields = {f.name: f for f in dataclasses.fields(spec_type)}
        hints = typing.get_type_hints(spec_type)
        for key, value in traits.items():
            where = f"{self.kind} {name!r}: {key}"
            if key not in fields:
                known = ", ".join(sorted(fields)) or "none"
                raise ConfigError(
                    f"{where} is not a field of {spec_type.__name__} (its fields: {known})"
                )
            if not _is_of(value, hints[key]):
                raise ConfigError(
                    f"{where}={value!r} is not of {spec_type.__name__}.{key}'s type "
                    f"{_type_name(hints[key])}"
                )
        return spec_type(**traits)

    def _valid_name(self, name: object) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(
                f"{self.kind}: registry names must be non-empty strings, got {name!r}"
            )

    def _put(self, entry: Entry[T, S], replace: bool) -> None:
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

    def entry(self, name: str, *, key: str | None = None) -> Entry[T, S]:
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

    def issues(self, name: str, *given: Any, own: bool = True) -> list[Any]:
        """The load-time problems of selecting entry `name`: its own checks (unless `own` is
        False), then the registry's rule, each given `given` (what that is, each registry's
        users say)."""
        entry = self.entry(name)
        found = entry.issues(*given) if own else []
        if self.rule is not None:
            rule = load_dotted(self.rule) if isinstance(self.rule, str) else self.rule
            found += list(rule(name, entry.spec, *given))
        return found

    def spec(self, name: str, *, key: str | None = None) -> S:
        """What entry `name` declares (nothing imported), or ConfigError for an unknown name."""
        return self.entry(name, key=key).spec

    def having(self, test: Callable[[S], object]) -> list[str]:
        """The names, sorted, of the entries whose spec passes `test` (for messages that say
        which entries can do what another cannot)."""
        return [n for n in self.names() if test(self._entries[n].spec)]

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


def _is_of(value: object, hint: Any) -> bool:
    """Whether `value` is of the type `hint` a spec field declares, as far as the forms specs use
    go (classes, unions, Literal, tuple[X, ...], Mapping/dict, Callable, Any)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_of(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if hint is None or hint is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is_of(v, args[0]) for v in value)
        return len(args) == len(value) and all(
            _is_of(v, a) for v, a in zip(value, args, strict=True)
        )
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            return False
        if len(args) == 2:
            return all(_is_of(k, args[0]) and _is_of(v, args[1]) for k, v in value.items())
        return True
    if origin is Callable or hint is Callable:
        return callable(value)
    if isinstance(hint, type):
        if hint is float:
            return isinstance(value, int | float) and not isinstance(value, bool)
        return isinstance(value, hint)
    return True  # a form specs do not use: not checked here


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("collections.abc.", "")


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
