"""Binding a plain mapping (parsed YAML) onto typed config dataclasses, checking every value.

`ConfigBinder` walks a dataclass's type hints and converts, checks and collects problems with their
dotted key paths (`buffer.batch_size`). It knows the config conventions that the dataclasses declare:
bounds in field metadata (`bounded`), Trinity-RFT keys accepted but ignored (`IGNORED_KEYS`), and
value aliases (`VALUE_ALIASES`), values refused with a reason (`REFUSED_VALUES`) and keys refused
with a reason (`REFUSED_KEYS`: Trinity-RFT / veRL keys asking for what rft does not do). A section
that selects a part whose own keys are bound beside its own (`PART_KEYS`: the selecting field's
name) keeps the keys it does not declare, unconverted, in its `part_keys` field: the part's
module declares them, and the parts' load stage binds them against the selected part's keys. It
raises nothing itself; the loader turns issues into ConfigError.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, Union

T = TypeVar("T")

# the field of a section open to its part's keys that holds them (see the module docstring)
PART_KEYS_FIELD = "part_keys"

_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}


class Alias(NamedTuple):
    """A value accepted for a field and replaced by `target`; `note` (if any) is warned to the user."""

    target: str
    note: str | None = None


class Bound(NamedTuple):
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        parts = []
        if self.ge is not None:
            parts.append(f">= {_num(self.ge)}")
        if self.gt is not None:
            parts.append(f"> {_num(self.gt)}")
        if self.le is not None:
            parts.append(f"<= {_num(self.le)}")
        if self.lt is not None:
            parts.append(f"< {_num(self.lt)}")
        return " and ".join(parts)

    def admits(self, value: float) -> bool:
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field whose number (or each number of a list) must lie within the bounds."""
    metadata = {"bound": Bound(ge=ge, gt=gt, le=le, lt=lt)}
    if isinstance(default, list):
        items = list(default)
        return field(default_factory=lambda: list(items), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Issue:
    """One problem found while binding: the key path and what is wrong there."""

    path: str
    message: str


@dataclass(frozen=True)
class Notice:
    """Something the user should hear about that does not stop loading (ignored or unknown keys)."""

    path: str
    message: str


class _Missing:
    """Stands in for a value that could not be bound; never escapes a failed load."""


MISSING_VALUE: Any = _Missing()


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _describe_value(value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{shown} ({type(value).__name__})"


def type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return f"a list of {type_name(item)}"
    if origin is dict:
        return "a mapping"
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return "a mapping (section)"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if hint in names:
        return names[hint]
    if hint is Path:
        return "a path (string)"
    if hint is Any:
        return "any value"
    return getattr(hint, "__name__", str(hint))


class ConfigBinder:
    """Converts nested mappings into dataclass instances, collecting issues and notices."""

    def __init__(self) -> None:
        self.issues: list[Issue] = []
        self.notices: list[Notice] = []

    def bind(self, cls: type[T], data: Any, path: str = "") -> T:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            self.issues.append(
                Issue(
                    path or "<root>", f"expected a mapping (section), got {_describe_value(data)}"
                )
            )
            return MISSING_VALUE
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        ignored: Mapping[str, str] = getattr(cls, "IGNORED_KEYS", {})
        aliases: Mapping[str, Mapping[str, Alias]] = getattr(cls, "VALUE_ALIASES", {})
        refused: Mapping[str, Mapping[str, str]] = getattr(cls, "REFUSED_VALUES", {})
        refused_keys: Mapping[str, str] = getattr(cls, "REFUSED_KEYS", {})
        open_to_part = getattr(cls, "PART_KEYS", None) is not None
        part_keys: dict[str, Any] = {}
        kwargs: dict[str, Any] = {}
        failed = False
        for key in data:
            if not isinstance(key, str):
                self.issues.append(Issue(join(path, str(key)), "keys must be strings"))
                continue
            key_path = join(path, key)
            if key in fields:
                continue
            if key in refused_keys:
                self.issues.append(Issue(key_path, f"is refused: {refused_keys[key]}"))
                failed = True
                continue
            if key in ignored:
                self.notices.append(
                    Notice(key_path, f"`{key_path}` is accepted but ignored by rft: {ignored[key]}")
                )
                continue
            if open_to_part:  # the selected part's, or unknown: the parts' stage says which
                part_keys[key] = data[key]
                continue
            suggestion = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean `{suggestion[0]}`?" if suggestion else ""
            self.notices.append(Notice(key_path, f"unknown key `{key_path}` is ignored{hint}"))
        for name, f in fields.items():
            key_path = join(path, name)
            if name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    if dataclasses.is_dataclass(hints[name]):
                        value = self.bind(hints[name], {}, key_path)
                    else:
                        self.issues.append(
                            Issue(key_path, f"is required ({type_name(hints[name])})")
                        )
                        value = MISSING_VALUE
                    if value is MISSING_VALUE:
                        failed = True
                    else:
                        kwargs[name] = value
                continue
            raw = data[name]
            if isinstance(raw, str) and raw in refused.get(name, {}):
                self.issues.append(Issue(key_path, f"{raw!r} is refused: {refused[name][raw]}"))
                failed = True
                continue
            alias_table = aliases.get(name, {})
            if isinstance(raw, str) and raw in alias_table:
                alias = alias_table[raw]
                if alias.note:
                    self.notices.append(
                        Notice(
                            key_path,
                            f"`{key_path}: {raw}` is read as `{alias.target}`: {alias.note}",
                        )
                    )
                raw = alias.target
            value = self.convert(hints[name], raw, key_path, f.metadata.get("bound"))
            if value is MISSING_VALUE:
                failed = True
            else:
                kwargs[name] = value
        if failed:
            return MISSING_VALUE
        bound = cls(**kwargs)
        if open_to_part:
            setattr(bound, PART_KEYS_FIELD, part_keys)
        return bound

    def convert(self, hint: Any, raw: Any, path: str, bound: Bound | None = None) -> Any:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            hint = typing.get_args(hint)[0]
            origin = typing.get_origin(hint)
        if origin in (Union, types.UnionType):
            options = typing.get_args(hint)
            if raw is None:
                if type(None) in options:
                    return None
                return self._fail(path, hint, raw)
            non_null = [o for o in options if o is not type(None)]
            if len(non_null) == 1:
                return self.convert(non_null[0], raw, path, bound)
            for option in non_null:
                probe = ConfigBinder()
                value = probe.convert(option, raw, path, bound)
                if value is not MISSING_VALUE and not probe.issues:
                    self.notices.extend(probe.notices)
                    return value
            return self._fail(path, hint, raw)
        if hint is Any:
            return raw
        if origin is Literal:
            allowed = typing.get_args(hint)
            if raw in allowed and type(raw) is type(allowed[allowed.index(raw)]):
                return raw
            close = [a for a in allowed if isinstance(a, str)]
            suggestion = (
                difflib.get_close_matches(str(raw), close, n=1, cutoff=0.6)
                if isinstance(raw, str)
                else []
            )
            hint_text = f"; did you mean {suggestion[0]!r}?" if suggestion else ""
            self.issues.append(
                Issue(
                    path,
                    f"expected {type_name(hint)}, got {_describe_value(raw)}{hint_text}",
                )
            )
            return MISSING_VALUE
        if origin is list:
            (item_hint,) = typing.get_args(hint) or (Any,)
            if isinstance(raw, str | int | float | bool):
                # a bare item stands for a list of one (`monitor_type: console`); a problem with
                # it is reported at the key the user wrote, not at an index they did not
                item = self.convert(item_hint, raw, path, bound)
                return MISSING_VALUE if item is MISSING_VALUE else [item]
            if not isinstance(raw, list | tuple):
                return self._fail(path, hint, raw)
            items = [
                self.convert(item_hint, item, join(path, i), bound) for i, item in enumerate(raw)
            ]
            return MISSING_VALUE if any(i is MISSING_VALUE for i in items) else items
        if origin is dict:
            key_hint, value_hint = typing.get_args(hint) or (str, Any)
            if not isinstance(raw, Mapping):
                return self._fail(path, hint, raw)
            out: dict[Any, Any] = {}
            bad = False
            for k, v in raw.items():
                if key_hint is str and not isinstance(k, str):
                    self.issues.append(Issue(join(path, str(k)), "keys must be strings"))
                    bad = True
                    continue
                value = self.convert(value_hint, v, join(path, str(k)))
                bad = bad or value is MISSING_VALUE
                out[k] = value
            return MISSING_VALUE if bad else out
        if dataclasses.is_dataclass(hint):
            return self.bind(hint, raw, path)  # type: ignore[arg-type]
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                return hint(raw)
            except ValueError:
                return self._fail(path, hint, raw)
        value = self._scalar(hint, raw, path)
        if value is MISSING_VALUE or bound is None or not isinstance(value, int | float):
            return value
        if not bound.admits(value):
            self.issues.append(
                Issue(path, f"expected a value {bound.describe()}, got {_describe_value(raw)}")
            )
            return MISSING_VALUE
        return value

    def _scalar(self, hint: Any, raw: Any, path: str) -> Any:
        # Strings are converted where the type is known: `${oc.env:VAR}` always yields a string.
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
                return raw.strip().lower() in _TRUE_WORDS
            return self._fail(path, hint, raw)
        if hint is int:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            if isinstance(raw, float) and raw.is_integer():
                return int(raw)
            if isinstance(raw, str):
                try:
                    return int(raw.strip())
                except ValueError:
                    pass
            return self._fail(path, hint, raw)
        if hint is float:
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                return float(raw)
            if isinstance(raw, str):
                try:
                    return float(raw.strip())
                except ValueError:
                    pass
            return self._fail(path, hint, raw)
        if hint is str:
            if isinstance(raw, str):
                return raw
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                return str(raw)  # a name like `split: 2024` reads as text
            return self._fail(path, hint, raw)
        if hint is Path:
            if isinstance(raw, str | Path):
                return Path(raw).expanduser()
            return self._fail(path, hint, raw)
        return self._fail(path, hint, raw)

    def _fail(self, path: str, hint: Any, raw: Any) -> Any:
        self.issues.append(Issue(path, f"expected {type_name(hint)}, got {_describe_value(raw)}"))
        return MISSING_VALUE
