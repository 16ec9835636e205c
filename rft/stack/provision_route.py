"""Choosing how to obtain an artefact (Kafka jars, the MinIO binary) from an ordered list of routes.

A route either already has the artefact (an install named by the environment, or an earlier
download or build in the cache) or can produce it with what the machine has. Routes that already
have it win, in list order; otherwise the first route that can produce it runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rft.errors import StackError


@dataclass(frozen=True)
class ProvisionContext:
    """What routes may look at: the cache, the environment and the PATH lookup (injectable)."""

    cache: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    which: Callable[[str], str | None] = shutil.which


class ProvisionRoute(Protocol):
    @property
    def name(self) -> str: ...

    def existing(self, ctx: ProvisionContext) -> Path | None:
        """The artefact if this route already has it, without side effects."""
        ...

    def can_produce(self, ctx: ProvisionContext) -> bool: ...

    def produce(self, ctx: ProvisionContext) -> Path: ...


@dataclass(frozen=True)
class RouteChoice:
    route: ProvisionRoute
    existing: Path | None  # None: the route must still produce it


def choose_route(what: str, routes: Sequence[ProvisionRoute], ctx: ProvisionContext) -> RouteChoice:
    for route in routes:
        found = route.existing(ctx)
        if found is not None:
            return RouteChoice(route, found)
    for route in routes:
        if route.can_produce(ctx):
            return RouteChoice(route, None)
    names = ", ".join(r.name for r in routes)
    raise StackError(f"no way to obtain {what}: none of the routes ({names}) applies here")


def obtain(what: str, routes: Sequence[ProvisionRoute], ctx: ProvisionContext) -> Path:
    choice = choose_route(what, routes, ctx)
    if choice.existing is not None:
        return choice.existing
    return choice.route.produce(ctx)
