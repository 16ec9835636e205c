"""W3C trace-context propagation through Kafka record headers.

`inject_trace_headers` writes `traceparent` (and `tracestate` when set) from an OpenTelemetry
context into a Kafka header list; `extract_trace_context` reads them back so a consumer continues
the producer's trace. Only the W3C TraceContext format is used, whatever global propagator is set,
so every process in a run agrees on the header names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_HEADERS = ("traceparent", "tracestate")

_PROPAGATOR = TraceContextTextMapPropagator()

HeaderList = list[tuple[str, bytes]]


class _HeaderSetter(Setter[HeaderList]):
    def set(self, carrier: HeaderList, key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode("ascii")))


class _HeaderGetter(Getter[Sequence[tuple[str, bytes | None]]]):
    def get(self, carrier: Sequence[tuple[str, bytes | None]], key: str) -> list[str] | None:
        values = [
            v.decode("ascii", errors="replace") for k, v in carrier if k == key and v is not None
        ]
        return values or None

    def keys(self, carrier: Sequence[tuple[str, bytes | None]]) -> list[str]:
        return [k for k, _ in carrier]


_SETTER = _HeaderSetter()
_GETTER = _HeaderGetter()


def inject_trace_headers(headers: HeaderList, context: Context | None = None) -> HeaderList:
    """Add the trace headers of `context` (default: the current one) to `headers`, in place.

    Nothing is added when no span is recording in that context.
    """
    _PROPAGATOR.inject(headers, context=context, setter=_SETTER)
    return headers


def extract_trace_context(
    headers: Iterable[tuple[str, bytes | None]] | None, context: Context | None = None
) -> Context:
    """The context carried by `headers`, on top of `context`; unchanged when they carry none.

    A malformed `traceparent` is ignored, as the W3C spec asks: the record is still processed.
    """
    return _PROPAGATOR.extract(list(headers or ()), context=context, getter=_GETTER)
