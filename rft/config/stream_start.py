"""Where a new consumer group starts on a topic: `explorer.tasks_from`, parsed once.

`earliest` (the topic's first record), `latest` (only what is published after the group first
joins), or a point in time: an ISO-8601 timestamp (`2026-11-22T17:00:00Z`; without a zone it is
UTC) or milliseconds since the epoch. A group that has committed offsets resumes from them
whatever this says: the start applies to a group's first read only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from rft.errors import ConfigError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StreamStart:
    """`kind` earliest / latest / timestamp; `timestamp_ms` set for timestamp only."""

    kind: Literal["earliest", "latest", "timestamp"]
    timestamp_ms: int | None = None


def parse_stream_start(text: object, key: str = "explorer.tasks_from") -> StreamStart:
    """The start `text` names; ConfigError naming `key` when it names none."""
    if isinstance(text, datetime):  # YAML reads an unquoted timestamp as a datetime
        return StreamStart("timestamp", _ms(text))
    if isinstance(text, int) and not isinstance(text, bool):
        return _from_ms(text, key)
    value = str(text).strip()
    if value in ("earliest", "latest"):
        return StreamStart(value)  # type: ignore[arg-type]
    if value.isdigit():
        return _from_ms(int(value), key)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{key}: {value!r} is not earliest, latest, an ISO-8601 timestamp "
            "(2026-11-22T17:00:00Z) or milliseconds since the epoch"
        ) from None
    return StreamStart("timestamp", _ms(moment))


def _ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    # exact integer arithmetic: timestamp() is a float, and x1000 of it can land 1 ms short
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _from_ms(ms: int, key: str) -> StreamStart:
    if ms < 0:
        raise ConfigError(f"{key}: a timestamp must be >= 0 ms since the epoch, got {ms}")
    return StreamStart("timestamp", ms)
