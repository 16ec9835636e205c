"""MetricFollower: feeds a run's configured metric sinks from its `metrics` topic.

A follower is a consumer group of its own, so every follower sees every metric. It writes a polled
batch to the sinks, flushes them, and only then commits the batch's offsets: a follower restarted
under the same group resumes after the last metric its sinks made durable. A crash between the
flush and the commit writes that one batch again on restart (at-least-once); a stop by signal or
idleness always commits what was flushed, so a clean restart duplicates nothing.

Two uses: `rft metrics follow` (any sinks, anywhere, any time), and `BackgroundMetricFollower`,
which `rft run` starts next to the explorer or the trainer in a split setup (mode explore /
train), filtered to that process's component.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from rft.config.connections import KafkaSettings
from rft.consumers.metrics.sinks import MetricFanout
from rft.events.models import Metric
from rft.events.reader import Envelope, EventReader, Resume
from rft.events.topics import ensure_topics

if TYPE_CHECKING:
    from rft.config import RftConfig

log = logging.getLogger(__name__)

# which component's metrics the process of each split-setup mode emits
MODE_COMPONENTS = {"explore": "explorer", "train": "trainer"}

# how long a finishing follower keeps reading while other components' metrics still arrive
DRAIN_LIMIT_S = 30.0
# how long waiting for the group's partitions does not count as idle
JOIN_LIMIT_S = 30.0


def default_follower(cfg: RftConfig) -> str:
    """A follower name that is the same exactly when the sinks and their destinations are."""
    identity = {
        "sinks": list(cfg.monitor.monitor_type),
        "args": cfg.monitor.monitor_args,
        "job_dir": str(cfg.job_dir.resolve()),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode())
    return f"sinks-{digest.hexdigest()[:12]}"


def follower_group(run_id: str, follower: str) -> str:
    """The consumer group of `rft metrics follow --follower NAME`."""
    return f"{run_id}.metrics-follower.{follower}"


def component_group(run_id: str, component: str) -> str:
    """The consumer group that feeds the sinks with `component`'s metrics in a split setup.

    Processes of one component share it (so two explorer processes write each metric once) and a
    restarted one resumes it.
    """
    return f"{run_id}.metrics-sinks.{component}"


@dataclass
class FollowSummary:
    written: int = 0  # metrics written to the sinks
    skipped: int = 0  # events not written: other components' metrics, non-Metric events
    parked: int = 0  # undecodable records parked in the dead-letter topic


class MetricFollower:
    """Reads `topic` as a member of `group` and writes its Metric events to `sinks`."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        group: str,
        sinks: MetricFanout,
        *,
        components: frozenset[str] | None = None,
        from_beginning: bool = False,
        dead_letter_topic: str | None = None,
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.group = group
        self.sinks = sinks
        self.components = components
        self.from_beginning = from_beginning
        self.dead_letter_topic = dead_letter_topic
        self.summary = FollowSummary()

    def run(
        self,
        stop: threading.Event,
        until_idle_s: float | None = None,
        finish: threading.Event | None = None,
    ) -> FollowSummary:
        """Follow until `stop` is set, or `until_idle_s` seconds pass without an event, or `finish`
        is set and a poll finds nothing more (so metrics written just before still reach the
        sinks). The sinks stay open; the caller closes them.
        """
        topics = [self.topic] + ([self.dead_letter_topic] if self.dead_letter_topic else [])
        ensure_topics(self.kafka, topics)
        with EventReader.open(
            self.kafka,
            self.group,
            [self.topic],
            from_beginning=self.from_beginning,
            dead_letter_topic=self.dead_letter_topic,
            resume=Resume.CONTINUE,  # what the sinks wrote is not written again
        ) as reader:
            last_event = time.monotonic()
            join_until = last_event + JOIN_LIMIT_S
            drain_until: float | None = None
            while not stop.is_set():
                finishing = finish is not None and finish.is_set()
                if finishing and drain_until is None:
                    drain_until = time.monotonic() + DRAIN_LIMIT_S
                elif finishing and drain_until is not None and time.monotonic() > drain_until:
                    # nothing is lost: the group's next member starts at the committed offset
                    log.warning("metrics still arriving after %.0f s; stopped", DRAIN_LIMIT_S)
                    break
                batch = reader.poll(500, timeout_s=0.5)
                parked = reader.parked_count
                if batch or parked != self.summary.parked:
                    self._write(batch)
                    self.sinks.flush()
                    reader.commit()  # only what the sinks made durable
                    self.summary.parked = parked
                    last_event = time.monotonic()
                elif not reader.assignment() and time.monotonic() < join_until:
                    last_event = time.monotonic()  # still joining the group: not idle yet
                else:
                    idle_s = time.monotonic() - last_event
                    if finishing or (until_idle_s is not None and idle_s >= until_idle_s):
                        break
        return self.summary

    def _write(self, batch: list[Envelope]) -> None:
        for envelope in batch:
            metric = envelope.event
            if not isinstance(metric, Metric) or (
                self.components is not None and metric.component not in self.components
            ):
                self.summary.skipped += 1
                continue
            self.sinks.write(metric)
            self.summary.written += 1


class BackgroundMetricFollower:
    """A MetricFollower on a thread of this process, for the duration of a `with` block.

    On leaving the block normally it drains what the component wrote, commits, joins the thread
    and closes the sinks (after an exception it stops without draining). A failure of the follower is kept in `error` (and logged); it never stops the
    explorer or trainer it runs beside.
    """

    def __init__(self, follower: MetricFollower) -> None:
        self.follower = follower
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metric-follower", daemon=True)

    @classmethod
    def for_component(cls, cfg: RftConfig, component: str) -> BackgroundMetricFollower:
        from rft.consumers.run_plan import RunPlan

        plan = RunPlan(cfg)
        sinks = MetricFanout.for_config(cfg)
        follower = MetricFollower(
            cfg.stack.kafka,
            plan.topics.metrics,
            component_group(plan.run_id, component),
            sinks,
            components=frozenset({component}),
            from_beginning=True,  # a new group starts with the run's first metric
            dead_letter_topic=plan.topics.dead_letter,
        )
        return cls(follower)

    def _run(self) -> None:
        try:
            self.follower.run(self._stop, finish=self._finish)
        except BaseException as exc:
            self.error = exc
            log.error("metric sinks stopped: %s", exc)

    def __enter__(self) -> BackgroundMetricFollower:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # after an interrupt, stop at once; else write what the component wrote last
        (self._stop if exc_type is not None else self._finish).set()
        self._thread.join()
        try:
            self.follower.sinks.close()
        except Exception as close_error:
            self.error = self.error or close_error
            log.error("metric sinks did not close cleanly: %s", close_error)
