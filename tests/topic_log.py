"""Reading a topic whole in a test: every envelope up to the topic's end as the call starts.

A reader of its own group polls from the beginning until its position in every partition has
reached that partition's end (for a read_committed reader, the last stable offset: what it can
reach), instead of until some polls come back empty, which cost every read several idle seconds.
Three empty polls after the partitions were assigned also end it (a position the client reports
short of a trailing transaction marker), and a deadline bounds the whole read. Right after a
transaction commits, its markers may not have reached its partitions yet: the ends are taken
once the stable end has met the log's end (or 2 s have passed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rft.config.connections import KafkaSettings
from rft.events.reader import Envelope, EventReader
from rft.events.topic_end import reached, topic_ends


def read_topic(
    kafka: KafkaSettings,
    topic: str,
    group: str,
    *,
    config: Mapping[str, Any] | None = None,
    dead_letter_topic: str | None = None,
    deadline_s: float = 120.0,
) -> list[Envelope]:
    """Every envelope of `topic`, in the order read (`config`: the consumer's, for example a
    read_uncommitted isolation level; `dead_letter_topic`: where undecodable records go)."""
    committed = (config or {}).get("isolation.level") != "read_uncommitted"
    ends = _ends(kafka, topic, committed)
    out: list[Envelope] = []
    deadline = time.monotonic() + deadline_s
    with EventReader.open(
        kafka,
        group,
        [topic],
        from_beginning=True,
        config=config,
        dead_letter_topic=dead_letter_topic,
    ) as reader:
        quiet = 0
        while time.monotonic() < deadline:
            got = reader.poll(500, timeout_s=0.5)
            out.extend(got)
            if not reader.assignment():
                continue
            if reached(reader, ends):
                break
            quiet = 0 if got else quiet + 1
            if quiet >= 3:
                break
    return out


def _ends(kafka: KafkaSettings, topic: str, committed: bool) -> dict[tuple[str, int], int]:
    """The partitions' ends to read up to. A transaction's markers land on its partitions after
    its commit returns, so right after a commit the last stable offset can still stand before
    what that commit made readable (a read would then end at once, empty): wait up to 2 s for
    it to meet the log's end. A transaction left open keeps them apart; then the stable end as
    it is."""
    ends = topic_ends(kafka, [topic], committed=committed)
    deadline = time.monotonic() + 2.0
    while committed and time.monotonic() < deadline:
        if ends == topic_ends(kafka, [topic], committed=False):
            break
        time.sleep(0.1)
        ends = topic_ends(kafka, [topic], committed=True)
    return ends
