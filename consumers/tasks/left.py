"""How many tasks an explorer group has not committed yet: the Task events on the tasks topic
between the group's committed offsets (the partition's start where it committed none) and the
last stable offset.

Offsets alone cannot say it: a published taskset ends each partition with a transaction marker,
which takes an offset but is no task. So the uncommitted spans are read (they are short at the
end of a run, and empty once the group has taken everything) and their Task events counted.
"""

from __future__ import annotations

from rft.config.connections import KafkaSettings
from rft.consumers.replay.topic_range import RangeReader
from rft.events.models import Task
from rft.events.transport import kafka_backend


def tasks_left(
    kafka: KafkaSettings, tasks_topic: str, group: str, *, read_at_most: int | None = None
) -> int | None:
    """Tasks of `tasks_topic` that `group` has not committed, now; None when the uncommitted
    spans hold more than `read_at_most` offsets (not read: surely some are tasks)."""
    with kafka_backend(kafka).admin() as admin:
        bounds = admin.partition_bounds([tasks_topic], committed=True)
        committed = {
            (o.topic, o.partition): o.offset
            for o in admin.group_offsets(group)
            if o.topic == tasks_topic
        }
    spans = {}
    for b in bounds:
        start = max(committed.get((b.topic, b.partition), b.low), b.low)
        if start < b.high:
            spans[(b.topic, b.partition)] = (start, b.high)
    if not spans:
        return 0
    if read_at_most is not None and sum(e - s for s, e in spans.values()) > read_at_most:
        return None
    with RangeReader.for_spans(kafka, spans) as reader:
        return sum(isinstance(env.event, Task) for batch in reader.batches() for env in batch)
