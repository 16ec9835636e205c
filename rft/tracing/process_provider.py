"""The process's global tracer provider, which can change runs: `install(provider)`.

OpenTelemetry lets a process set its global tracer provider once, and a tracer taken from it
(every module's `trace.get_tracer(__name__)`) stays bound to that provider. `rft run` of a config
with `stages:` runs its stages one after another in one process, each a run of its own (its
name, its `rft.run` label, its exporter): with the first stage's provider fixed for the
process, a later stage's spans were labelled with the first stage's run. So the global provider
installed here is a switch: its tracers look up the provider installed last each time they start
a span, and installing another flushes the one it replaces.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

_LOCK = threading.Lock()
_SWITCH: _SwitchedProvider | None = None


def install(provider: TracerProvider) -> None:
    """Make `provider` the one behind every tracer of the process, now and already taken; the
    provider it replaces exports what it holds first."""
    global _SWITCH
    with _LOCK:
        if _SWITCH is None:
            _SWITCH = _SwitchedProvider(provider)
            trace.set_tracer_provider(_SWITCH)
            return
        previous, _SWITCH.current = _SWITCH.current, provider
    if previous is not provider:
        previous.force_flush()


class _SwitchedProvider(trace.TracerProvider):
    """A TracerProvider whose tracers follow `current`."""

    def __init__(self, current: TracerProvider) -> None:
        self.current = current

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwitchedTracer(self, args, kwargs)


class _SwitchedTracer(trace.Tracer):
    """A tracer of whichever provider is current when a span starts (the real tracer is taken
    again only when the provider changed)."""

    def __init__(self, owner: _SwitchedProvider, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._owner = owner
        self._args, self._kwargs = args, kwargs
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer | None = None

    def _now(self) -> trace.Tracer:
        provider = self._owner.current
        tracer = self._tracer
        if tracer is None or self._provider is not provider:
            tracer = provider.get_tracer(*self._args, **self._kwargs)
            self._provider, self._tracer = provider, tracer
        return tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._now().start_span(*args, **kwargs)

    def start_as_current_span(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AbstractContextManager[trace.Span] | Iterator[trace.Span]:
        return self._now().start_as_current_span(*args, **kwargs)
