"""The fate of every config key: what it does, the code that acts on it, the test that shows it.

Each field of the config dataclasses declares its fate where it is defined, with `key(...)`: one
`Fate` in the field's metadata, so a key is described once (the generated reference page,
`rft config keys` and `rft config reference` all read it from there). A taskset's fields serve the
training taskset and every eval taskset alike. Keys that rft accepts without acting on are not
fields: they live in each section's IGNORED_KEYS with the sentence the user is warned with.
`tests/unit/test_key_fates.py` fails when a field has no fate, or a fate names a module or test
that does not mention its key.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

from rft.config.fate import Fate
from rft.config.schema import RftConfig


def key_fates() -> dict[str, Fate]:
    """`Section.field` -> its fate, for every leaf field that declares one."""
    return {name: fate for name, _, fate in _fated_fields() if fate is not None}


def _fated_fields() -> Iterator[tuple[str, str, Fate | None]]:
    for name, path, f in _walk_fields(RftConfig, "", set()):
        yield name, path, f.metadata.get("fate")


def config_fields() -> Iterator[tuple[str, str]]:
    """(`Section.field`, an example dotted key path) for every leaf field of the config."""
    for name, path, _ in _fated_fields():
        yield name, path


def config_sections() -> Iterator[tuple[str, type[Any]]]:
    """(an example dotted path, the dataclass) for every section, the top level first."""
    yield "", RftConfig
    yield from _sections(RftConfig, "", set())


def _sections(cls: type[Any], prefix: str, seen: set[str]) -> Iterator[tuple[str, type[Any]]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        section = _section_type(hints[f.name])
        if section is None or section.__name__ in seen:
            continue
        seen.add(section.__name__)
        path = f"{prefix}.{f.name}" if prefix else f.name
        yield path, section
        yield from _sections(section, path, seen)


def _walk_fields(
    cls: type[Any], prefix: str, seen: set[str]
) -> Iterator[tuple[str, str, dataclasses.Field[Any]]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:  # a section's holder of its part's keys (rft.config.binding)
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        section = _section_type(hints[f.name])
        if section is not None:
            yield from _walk_fields(section, path, seen)
            continue
        name = f"{cls.__name__}.{f.name}"
        if name not in seen:
            seen.add(name)
            yield name, path, f


def _section_type(hint: Any) -> type[Any] | None:
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    for arg in typing.get_args(hint):
        found = _section_type(arg)
        if found is not None:
            return found
    return None


def implemented_keys() -> list[tuple[str, Fate]]:
    """(example key path, fate) for every field, in config order."""
    return [(path, fate) for _, path, fate in _fated_fields() if fate is not None]


def ignored_keys() -> list[tuple[str, str]]:
    """(example key path, the warning's reason) for every key rft accepts without acting on."""
    out: list[tuple[str, str]] = []
    _ignored(RftConfig, "", out, set())
    return out


def _ignored(cls: type[Any], prefix: str, out: list[tuple[str, str]], seen: set[str]) -> None:
    if cls.__name__ in seen:
        return
    seen.add(cls.__name__)
    for key, reason in getattr(cls, "IGNORED_KEYS", {}).items():
        out.append((f"{prefix}.{key}" if prefix else key, reason))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        section = _section_type(hints[f.name])
        if section is not None:
            _ignored(section, f"{prefix}.{f.name}" if prefix else f.name, out, seen)
