"""Where a topic ends for a reader that reads it whole once, and whether a reader got there.

A reader that must see all of a topic as it stands (the claims of an id, the eval tasks, whether
a taskset was published) takes the partitions' ends when it starts and reads until its position
reaches each: it knows it has read everything without waiting for polls to come back empty. For
a read_committed reader the end is the last stable offset, since a record past it sits in a
transaction still open. A partition that keeps no offset (nothing written, or all of it deleted)
has nothing to read and no end to reach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rft.config.connections import KafkaSettings
from rft.events.reader import EventReader
from rft.events.transport import kafka_backend

Partition = tuple[str, int]


def topic_ends(
    kafka: KafkaSettings, topics: Sequence[str], *, committed: bool = True, timeout_s: float = 10.0
) -> dict[Partition, int]:
    """The end offset of every partition of `topics` that keeps any offset."""
    with kafka_backend(kafka).admin() as admin:
        return {
            (b.topic, b.partition): b.high
            for b in admin.partition_bounds(topics, timeout_s=timeout_s, committed=committed)
            if b.high > b.low
        }


def reached(reader: EventReader, ends: Mapping[Partition, int]) -> bool:
    """Whether `reader` holds its partitions and its position is at or past each of `ends`."""
    if not reader.assignment():
        return False
    positions = reader.positions()
    return all(positions.get(tp, -1) >= end for tp, end in ends.items())
