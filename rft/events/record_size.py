"""The size of a Kafka record as a producer's limit counts it, and the refusal of a record over it.

A producer refuses a record bigger than its limit (librdkafka's `message.max.bytes`, default
1,000,000; kafka-python's `max.request.size`, default 1,048,576), and the broker refuses a batch
bigger than the topic's `max.message.bytes` (default 1,048,588). Left to the clients, the first
says only "Message size too large" and the second fails at flush, after the transaction it belongs
to is under way. rft checks every record against its producer's limit before queueing it and
raises `RecordTooLargeError` with the topic, the sizes and the setting to change, so the caller
can refuse that one record (the explorer dead-letters its task) and go on.
"""

from __future__ import annotations

from collections.abc import Sequence

from rft.errors import RecordTooLargeError

# What the clients add to key, value and header bytes before comparing with their limit: a record
# alone counts 36 bytes more in librdkafka, and 61 (its batch's header) plus the record's varints
# in kafka-python (91 bytes with rft's two usual headers). 100 covers both; each header adds its
# two length varints. A record refused here may be up to ~60 bytes under what a client accepts.
RECORD_FRAMING_BYTES = 100
HEADER_FRAMING_BYTES = 10


def record_bytes(
    value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None
) -> int:
    """The bytes a record takes against a producer's limit: value, key, headers and framing."""
    size = RECORD_FRAMING_BYTES + len(value) + (len(key) if key else 0)
    for name, header in headers or ():
        size += HEADER_FRAMING_BYTES + len(name.encode()) + (len(header) if header else 0)
    return size


def refuse_oversized(
    topic: str,
    value: bytes,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    limit: int,
    setting: str,
) -> None:
    """Raise RecordTooLargeError when the record would exceed `limit` (set by `setting`)."""
    size = record_bytes(value, key, headers)
    if size <= limit:
        return
    shown = key.decode("utf-8", "replace") if key else None
    raise RecordTooLargeError(
        f"record for {topic} (key {shown!r}) is {size:,} bytes ({len(value):,} of them the "
        f"event), over the producer's limit of {limit:,} bytes ({setting}, set in "
        f"stack.kafka.extra; the broker's message.max.bytes and the topic's max.message.bytes "
        "must allow it too); refused before sending"
    )
