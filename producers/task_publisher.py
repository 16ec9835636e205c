"""`TaskPublisher`: turns loaded tasksets into Task events on the tasks (or eval-tasks) topic.

Training tasksets are written `epochs` times, each epoch in the order of the taskset's task
selector (`rft.producers.task_selectors`: sequential, a seeded shuffle, seeded random draws, an
offline easy-to-hard curriculum); eval tasksets once, in file order. A training taskset with an
online selector (difficulty_based) is left to the task feeder (`rft.consumers.tasks.feeder`). Task ids are `<taskset>:<epoch>:<index>` (index = the row's position
in the file; a row drawn again in one epoch gets `.<k>` appended), and each task's key is its id.
Keys spread a taskset over the topic's partitions, so each task also carries its `position` in
the published sequence (0, 1, ... over all epochs): explorers merge their partitions by it
(`rft.consumers.tasks.order`) and explore in the selector's order.
Each task is sent inside its own root `task.publish` span, so its trace starts here.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from tqdm import tqdm

from rft.config.connections import KafkaSettings
from rft.config.schema import RftConfig
from rft.datasets.rows import BadRow
from rft.errors import ConfigError, DecodeError
from rft.events.models import Task, now_ms
from rft.events.reader import EventReader
from rft.events.topic_end import reached, topic_ends
from rft.events.topics import TopicNames
from rft.events.writer import EventWriter
from rft.producers.task_selectors import TASK_SELECTORS, is_online
from rft.producers.taskset_reader import LoadedTaskset, load_taskset
from rft.tracing.spans import publish_span


class TaskSink(Protocol):
    """What the publisher needs from `rft.events.writer.EventWriter`."""

    def send(self, topic: str, event: Task, key: str | None = None) -> None: ...

    def flush(self) -> None: ...


@dataclass
class PublishSummary:
    """What was published: tasks per taskset and epoch, target topics, and every bad row."""

    counts: dict[str, dict[int, int]] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)
    bad_rows: dict[str, list[BadRow]] = field(default_factory=dict)
    fed_online: list[str] = field(default_factory=list)  # tasksets left to the task feeder

    @property
    def total(self) -> int:
        return sum(sum(per_epoch.values()) for per_epoch in self.counts.values())

    @property
    def bad_row_count(self) -> int:
        return sum(len(rows) for rows in self.bad_rows.values())

    def lines(self) -> list[str]:
        """A human-readable report, one line per taskset and per bad row."""
        out = []
        for name, per_epoch in self.counts.items():
            epochs = ", ".join(f"epoch {e}: {n}" for e, n in sorted(per_epoch.items()))
            out.append(f"{name} -> {self.topics[name]}: {sum(per_epoch.values())} tasks ({epochs})")
        for name, rows in self.bad_rows.items():
            out.extend(f"{name}: skipped bad row {bad}" for bad in rows)
        out.extend(
            f"{name}: its online task selector publishes batch by batch from rewards: run "
            "`rft feed` (rft run starts it)"
            for name in self.fed_online
        )
        return out


def task_id(taskset: str, epoch: int, index: int) -> str:
    return f"{taskset}:{epoch}:{index}"


def epoch_order(taskset: LoadedTaskset, seed: int, epoch: int) -> list[int]:
    """Positions of the rows in the order epoch `epoch` publishes them (eval: file order)."""
    if taskset.is_eval:
        return list(range(len(taskset.rows)))
    if is_online(taskset.selector):
        raise ConfigError(
            f"taskset {taskset.name!r}: task_selector {taskset.selector!r} chooses tasks from "
            "observed rewards, batch by batch: its tasks come from the task feeder (`rft feed`), "
            "not from an up-front publish"
        )
    selector = TASK_SELECTORS.get(taskset.selector)
    return selector(
        len(taskset.rows), epoch, seed, taskset.selector_features, **taskset.selector_args
    )


class TaskPublisher:
    """Writes Task events through an EventWriter-like sink and flushes once per taskset."""

    def __init__(
        self,
        sink: TaskSink,
        *,
        clock: Callable[[], int] = now_ms,
        progress: bool | None = None,
    ) -> None:
        self.sink = sink
        self.clock = clock
        self.progress = sys.stderr.isatty() if progress is None else progress

    def publish(
        self,
        taskset: LoadedTaskset,
        topic: str,
        *,
        epochs: int = 1,
        seed: int = 42,
        summary: PublishSummary | None = None,
    ) -> PublishSummary:
        """Publish `taskset` (eval tasksets: one epoch, file order) and return the summary."""
        summary = summary if summary is not None else PublishSummary()
        epochs = 1 if taskset.is_eval else epochs
        summary.topics[taskset.name] = topic
        summary.bad_rows[taskset.name] = list(taskset.bad_rows)
        per_epoch = summary.counts.setdefault(taskset.name, {})
        rows = taskset.rows
        with tqdm(
            total=len(rows) * epochs, desc=f"publish {taskset.name}", disable=not self.progress
        ) as bar:
            position = 0  # in the published sequence, over all epochs
            for epoch in range(epochs):
                draws: dict[int, int] = {}
                for row in epoch_order(taskset, seed, epoch):
                    # a selector that draws with replacement repeats rows: ids stay unique
                    draw = draws[row] = draws.get(row, -1) + 1
                    task = self.make_task(taskset, epoch, row, position=position, draw=draw)
                    position += 1
                    with publish_span(task, topic):  # each task starts a trace of its own
                        self.sink.send(topic, task, key=task.task_id)
                    per_epoch[epoch] = per_epoch.get(epoch, 0) + 1
                    bar.update(1)
        self.sink.flush()
        if not summary.bad_rows[taskset.name]:
            del summary.bad_rows[taskset.name]
        return summary

    def make_task(
        self, taskset: LoadedTaskset, epoch: int, row_position: int, *, position: int, draw: int = 0
    ) -> Task:
        """The task of row `row_position` (in the loaded rows) at `position` in the sequence."""
        row = taskset.rows[row_position]
        tid = task_id(taskset.name, epoch, row.index)
        return Task(
            task_id=tid if draw == 0 else f"{tid}.{draw}",
            taskset=taskset.name,
            epoch=epoch,
            index=row.index,
            payload=row.payload,
            format=dict(taskset.format),
            workflow=taskset.workflow,
            reward_fn=taskset.reward_fn,
            rollout_args=dict(taskset.rollout_args),
            repeat_times=taskset.repeat_times,
            is_eval=taskset.is_eval,
            created_at=self.clock(),
            position=position,
        )


def load_run_tasksets(config: RftConfig, *, on_bad_rows: str = "fail") -> list[LoadedTaskset]:
    """Every taskset of a run config (`buffer.explorer_input.taskset` then `eval_tasksets`),
    all read and checked before anything is published."""
    inputs = config.buffer.explorer_input
    loaded = []
    if inputs.taskset is not None:
        loaded.append(load_taskset(inputs.taskset, on_bad_rows=on_bad_rows))
    loaded.extend(
        load_taskset(taskset, is_eval=True, on_bad_rows=on_bad_rows)
        for taskset in inputs.eval_tasksets
    )
    return loaded


def publish_tasksets(
    publisher: TaskPublisher,
    tasksets: list[LoadedTaskset],
    topics: TopicNames,
    *,
    epochs: int,
    seed: int,
) -> PublishSummary:
    """Training tasksets to `topics.tasks` (`epochs` epochs), eval ones to `topics.eval_tasks`."""
    summary = PublishSummary()
    for taskset in tasksets:
        if not taskset.is_eval and is_online(taskset.selector):
            summary.fed_online.append(taskset.name)  # the task feeder publishes it (rft feed)
            continue
        topic = topics.eval_tasks if taskset.is_eval else topics.tasks
        publisher.publish(taskset, topic, epochs=epochs, seed=seed, summary=summary)
    return summary


#: A large taskset may take minutes to send; the broker's default cap on a transaction is 15 min.
PUBLISH_TRANSACTION_TIMEOUT_MS = 900_000


@contextlib.contextmanager
def publish_transaction(kafka: KafkaSettings, transactional_id: str) -> Iterator[EventWriter]:
    """A writer inside one Kafka transaction, committed when the block ends and aborted when it
    raises: readers (read_committed) see everything it sent or, after a crash or an error
    part-way, nothing."""
    with EventWriter.open(
        kafka,
        transactional_id=transactional_id,
        config={"transaction.timeout.ms": PUBLISH_TRANSACTION_TIMEOUT_MS},
    ) as writer:
        writer.begin()
        try:
            yield writer
        except BaseException:
            writer.abort()
            raise
        writer.commit()


def publish_atomically(
    kafka: KafkaSettings,
    tasksets: list[LoadedTaskset],
    topics: TopicNames,
    *,
    epochs: int,
    seed: int,
    transactional_id: str,
) -> PublishSummary:
    """`publish_tasksets` inside one Kafka transaction (`publish_transaction`)."""
    with publish_transaction(kafka, transactional_id) as writer:
        return publish_tasksets(TaskPublisher(writer), tasksets, topics, epochs=epochs, seed=seed)


def has_committed_tasks(
    kafka: KafkaSettings, topic: str, quiet_s: float = 10.0, timeout_s: float = 60.0
) -> bool:
    """Whether `topic` holds at least one committed record (what an explorer would read).

    A topic whose partitions keep no offset at all holds none. Otherwise offsets cannot tell (an
    aborted publish leaves offsets and markers but no readable record), so this reads, as a
    throwaway group that commits nothing, until a record arrives (yes), or its position reaches
    every partition's last stable offset with none read (no: what follows is still in an open
    transaction), or, should the client not report such a position, the assigned partitions
    stay silent for `quiet_s` (no). The last wait is long on purpose: a wrong "no" makes `rft
    run` publish the taskset a second time.
    """
    ends = topic_ends(kafka, [topic], timeout_s=timeout_s)
    if not ends:
        return False
    group = f"rft-publish-check-{uuid.uuid4().hex[:12]}"
    deadline = time.monotonic() + timeout_s
    with EventReader.open(kafka, group, [topic], from_beginning=True) as reader:
        silent_since = None
        while time.monotonic() < deadline:
            try:
                if reader.poll(1, timeout_s=0.5):
                    return True
            except DecodeError:
                return True  # a corrupt record is still a record: the explorer parks it
            if reached(reader, ends):
                return False
            if reader.assignment():
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > quiet_s:
                    return False
    return False
