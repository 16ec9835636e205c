"""A part's own keys, bound where Trinity-RFT users write them: beside the section that selects it.

A rollout engine's settings (vLLM's `gpu_memory_utilization`, ...) are keys of
`explorer.rollout_model`, but only the engine reads them, so the engine's module declares them: a
dataclass of `key(...)` fields named by its spec's `keys` (a dotted path, so declaring them imports
nothing heavy). The binder keeps a section's undeclared keys in its `part_keys` (rft.config.binding);
this stage binds them against the selected part's keys (types, bounds, the same located issues as
any key) and keeps the converted values there for the part to read. A key that another entry of
the registry declares is warned as that entry's, ignored by the one selected; any other key is
warned as unknown, with the closest name.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from rft.config.binding import PART_KEYS_FIELD, ConfigBinder, Issue, Notice, join
from rft.config.reference import PartKeys
from rft.registry import Registry, load_dotted


def keys_of(target: str | None) -> type[Any] | None:
    """The dataclass at a spec's `keys` dotted path (None: the part declares no keys)."""
    return None if target is None else load_dotted(target)


def bind_part_keys(
    registry: Registry[Any, Any], name: str, at: str, section: Any
) -> tuple[list[Issue], list[Notice]]:
    """Bind `section`'s undeclared keys (at key path `at`) against the keys of entry `name`."""
    raw: dict[str, Any] = getattr(section, PART_KEYS_FIELD)
    if not raw:
        return [], []
    selector = type(section).PART_KEYS
    cls = keys_of(registry.spec(name).keys)
    own = {f.name for f in dataclasses.fields(cls)} if cls is not None else set()
    binder = ConfigBinder()
    bound = binder.bind(cls, {k: v for k, v in raw.items() if k in own}, at) if cls else None
    notices = list(binder.notices)
    for key in raw:
        if key in own:
            continue
        path = join(at, key)
        owners = [n for n in registry.names() if n != name and key in _declared(registry, n)]
        if owners:
            notices.append(
                Notice(
                    path,
                    f"`{path}` is a key of {selector} {', '.join(owners)}; {selector} {name} "
                    "does not read it, so it is ignored",
                )
            )
            continue
        known = sorted(own | {f.name for f in dataclasses.fields(section) if f.init})
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        notices.append(Notice(path, f"unknown key `{path}` is ignored{hint}"))
    if binder.issues or bound is None:
        setattr(section, PART_KEYS_FIELD, {})
        return list(binder.issues), notices
    setattr(section, PART_KEYS_FIELD, {k: getattr(bound, k) for k in raw if k in own})
    return [], notices


def _declared(registry: Registry[Any, Any], name: str) -> set[str]:
    try:
        cls = keys_of(registry.spec(name).keys)
    except (ImportError, AttributeError):  # a plugin's keys that do not import: its own problem
        return set()
    return {f.name for f in dataclasses.fields(cls)} if cls is not None else set()


def parts_keys() -> list[PartKeys]:
    """The keys every registered part declares, for the configuration reference."""
    from rft.engines.rollout import ROLLOUT_ENGINES

    found = []
    for name in ROLLOUT_ENGINES.names():
        cls = keys_of(ROLLOUT_ENGINES.spec(name).keys)
        if cls is not None:
            found.append(PartKeys("explorer.rollout_model", "engine_type", name, cls))
    return found
