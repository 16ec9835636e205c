"""How a config field declares its fate: what it does, the code that acts on it, the test that shows it.

The schema's dataclasses declare each field with `key(...)` (or `field(metadata=fate(...))` for a
required one), so a key is described once, where it is defined; `rft.config.key_fates` reads the
fates back for the reference page and `rft config keys`.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Fate:
    """What one key does (`does`), where (`acts_in`), and the test that exercises it."""

    does: str
    acts_in: str
    shown_by: str


def key(
    default: Any,
    *,
    does: str,
    acts_in: str,
    shown_by: str,
    shown_default: str | None = None,
) -> Any:
    """A config field with a default, carrying its fate. `default` is a value or a `field(...)` /
    `bounded(...)` (whose metadata is kept); `shown_default` describes a default computed at load
    (an environment variable's), which the reference shows instead of this machine's value."""
    meta = fate(does, acts_in, shown_by)
    if shown_default is not None:
        meta["shown_default"] = shown_default
    if isinstance(default, dataclasses.Field):
        default.metadata = types.MappingProxyType({**default.metadata, **meta})
        return default
    return field(default=default, metadata=meta)


def fate(does: str, acts_in: str, shown_by: str) -> dict[str, Any]:
    """Field metadata holding a key's fate; a required field declares it as
    `field(metadata=fate(...))`, so type checkers still see it has no default."""
    return {"fate": Fate(does, acts_in, shown_by)}
