"""The explorer's step counter, kept in Kafka beside its committed task offsets.

Each step's transaction commits the task offsets with `{"step": N, "explorer": id}` as the
offsets' metadata, so the step is durable exactly when the step's experiences are. A restarted
explorer reads its group's committed offsets and continues at the highest step found there:
step-based schedules (eval_interval, sync_interval, total_steps) carry on instead of restarting.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from rft.events.transport import TopicPartitionOffset

log = logging.getLogger(__name__)


def progress_metadata(step: int, explorer_id: str) -> str:
    """The commit metadata of step `step` (kept short: brokers cap metadata at 4 KiB)."""
    return json.dumps({"step": step, "explorer": explorer_id}, separators=(",", ":"))


def resumed_step(committed: Sequence[TopicPartitionOffset]) -> int:
    """The highest step in the metadata of `committed`; 0 when there is none.

    Metadata that is not ours (another tool committed for the group, or none) is skipped with a
    warning naming the partition, never guessed at.
    """
    step = 0
    for o in committed:
        if not o.metadata:
            continue
        try:
            value = json.loads(o.metadata)["step"]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"step must be an integer >= 0, got {value!r}")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "%s[%d]@%d: commit metadata %r is not an explorer step (%s); ignored",
                o.topic,
                o.partition,
                o.offset,
                o.metadata[:80],
                exc,
            )
            continue
        step = max(step, value)
    return step
