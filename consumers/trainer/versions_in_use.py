"""The checkpoint versions live explorers still report loaded: what retention must not delete.

An explorer is live while its weights follower (group `<run>.weights.<explorer id>`) has members;
it reports the version it holds in every experience it writes (`model_version`), which is what
`rft status` shows as its loaded version. Read here from the tail of the experience topic, with
`rft.consumers.ops.run_status`, only when a prune would delete something.
"""

from __future__ import annotations

import logging

from rft.config.connections import KafkaSettings
from rft.consumers.ops.run_status import read_run_status
from rft.events.topics import TopicNames

log = logging.getLogger(__name__)


def versions_in_use(
    kafka: KafkaSettings, topics: TopicNames, experience_topic: str, tail: int = 500
) -> set[int] | None:
    """Versions live explorers report loaded; None when a live explorer's version is unknown
    (it has written no experience in the last `tail` offsets of each partition yet), in which
    case nothing may be pruned."""
    status = read_run_status(kafka, topics, experience_topic, tail=tail, dead_letter_limit=0)
    live = [e for e in status.explorers if e.live]
    unknown = [e.explorer_id for e in live if e.loaded_version is None]
    if unknown:
        log.info(
            "retention: live explorer(s) %s report no loaded version yet: nothing pruned now",
            ", ".join(unknown),
        )
        return None
    return {e.loaded_version for e in live if e.loaded_version is not None}
