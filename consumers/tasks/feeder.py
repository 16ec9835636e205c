"""TaskFeeder (`rft feed`): publishes an online selector's tasks batch by batch, steered by rewards.

An online task selector (`difficulty_based`) cannot publish its epochs up front: each batch
depends on the rewards of the batches before it. So selection happens in this process, which
sits between the taskset and the `tasks` topic:

1. it reads the experience topic (and the dead-letter topic) from the beginning, feeding each
   experience's reward to the selector under the task's row, and counting a task answered once a
   whole rollout group (or a dead letter) for it is in;
2. while at most `lookahead_batches` - 1 batches' worth of tasks are unanswered, it asks the
   selector for the next `buffer.batch_size` rows and publishes them as Task events `<taskset>:r<round>:<index>`,
   in one Kafka transaction that also commits its consumer group's offsets with
   `{"round": R, "published": N}` as their metadata. Each task is sent inside its own root
   `task.publish` span, so its trace starts here as it does in the publisher.

Exactly resumable: the committed metadata says how many rounds are durable, a restarted feeder
re-reads the experience log from the start (the selector's state depends only on which rewards
it has seen), and round R's draw is seeded by (seed, R). Each committed round is therefore the
selector's choice from the rewards seen when it was made; a crash between rounds loses nothing
and repeats nothing. Explorers read the tasks topic as they would a published taskset.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from dataclasses import dataclass, field

from rft.config import RftConfig
from rft.consumers.run_plan import RunPlan
from rft.contact.first_contact import require_kafka
from rft.errors import ConfigError, FencedError, TransportError
from rft.events.models import DeadLetter, Experience, Task
from rft.events.reader import Envelope, EventReader, Resume
from rft.events.transport import TopicPartitionOffset, kafka_outage_window
from rft.events.writer import EventWriter
from rft.producers.metric_emitter import MetricEmitter
from rft.producers.task_publisher import TaskPublisher
from rft.producers.task_selectors import ONLINE_TASK_SELECTORS, OnlineTaskSelector
from rft.producers.taskset_reader import LoadedTaskset
from rft.tracing.spans import publish_span

log = logging.getLogger(__name__)


def online_task_id(taskset: str, round_index: int, row_index: int) -> str:
    return f"{taskset}:r{round_index}:{row_index}"


def parse_online_task_id(task_id: str) -> tuple[str, int, int] | None:
    """(taskset, round, row index) of an id made by `online_task_id`, else None."""
    parts = task_id.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].startswith("r"):
        return None
    try:
        return parts[0], int(parts[1][1:]), int(parts[2])
    except ValueError:
        return None


@dataclass
class FeedSummary:
    rounds: int = 0  # rounds durable in the tasks topic
    published: int = 0  # tasks in them
    resumed_rounds: int = 0  # rounds found committed when this process started
    observed: int = 0  # experiences whose rewards reached the selector
    answered: set[str] = field(default_factory=set)
    rounds_this_run: list[list[int]] = field(default_factory=list)  # row indexes per round
    observed_at_round: list[int] = field(default_factory=list)  # rewards seen when choosing


class TaskFeeder:
    def __init__(self, cfg: RftConfig, taskset: LoadedTaskset) -> None:
        if taskset.selector not in ONLINE_TASK_SELECTORS:
            raise ConfigError(
                f"taskset {taskset.name!r}: task_selector {taskset.selector!r} is not online; "
                "`rft publish` publishes its tasks"
            )
        self.cfg = cfg
        self.plan = RunPlan(cfg)
        self.taskset = taskset
        self.seed = cfg.explorer.rollout_model.seed
        cls = ONLINE_TASK_SELECTORS.get(taskset.selector)
        self.selector: OnlineTaskSelector = cls(
            len(taskset.rows), self.seed, taskset.selector_features, **taskset.selector_args
        )
        self.lookahead = int(getattr(self.selector, "lookahead_batches", 1))
        self.batch_size = self.plan.batch_size
        total_steps = cfg.buffer.total_steps
        self.total = (
            total_steps * self.batch_size
            if total_steps
            else cfg.buffer.total_epochs * len(taskset.rows)
        )
        self.position_of = {row.index: i for i, row in enumerate(taskset.rows)}
        self.group = f"{self.plan.run_id}.feeder.{taskset.name}"
        self.summary = FeedSummary()
        self._groups: dict[str, int] = {}  # group id -> experiences seen
        self._positions: dict[tuple[str, int], int] = {}  # next offset to read, per partition

    def run(
        self, stop: threading.Event | None = None, max_rounds: int | None = None
    ) -> FeedSummary:
        """Feed until `total` tasks are published (or `stop`, or `max_rounds` rounds this run)."""
        stop = stop or threading.Event()
        kafka = self.cfg.stack.kafka
        topics = self.plan.topics
        require_kafka(kafka)  # a config error in seconds, not an outage (first_contact.py)
        self.plan.ensure_topics()
        with (
            EventReader.open(
                kafka,
                self.group,
                [self.plan.experience_topic, topics.dead_letter],
                from_beginning=True,
                dead_letter_topic=topics.dead_letter,
                resume=Resume.CONTINUE,  # what it observed stays observed
            ) as reader,
            EventWriter.open(kafka, transactional_id=self.group) as tx,
            EventWriter.open(kafka) as plain,
        ):
            metrics = MetricEmitter(plain, topics.metrics, "feeder", self.plan.run_id)
            self._resume(reader)
            publisher = TaskPublisher(tx)
            s = self.summary
            this_run = 0
            while s.published < self.total and not stop.is_set():
                self._observe(reader.poll(500, timeout_s=0.5))
                if max_rounds is not None and this_run >= max_rounds:
                    break
                # at most lookahead_batches batches outstanding once this one is out
                if s.published - len(s.answered) <= (self.lookahead - 1) * self.batch_size:
                    self._publish_round(reader, tx, publisher, metrics)
                    this_run += 1
            plain.flush()
        return s

    # -- pieces -------------------------------------------------------------------------------

    def _resume(self, reader: EventReader) -> None:
        """Rounds from the committed metadata; the selector's state is rebuilt by re-reading the
        logs from their start (the loop's polls)."""
        while not reader.assignment():  # every partition is ours: a one-member group
            reader.poll(500, timeout_s=0.5)  # unobserved: the log is re-read from its start
        for topic, partition in reader.assignment():
            self._positions.setdefault((topic, partition), 0)
        for o in reader.committed():
            self._positions[(o.topic, o.partition)] = max(
                self._positions.get((o.topic, o.partition), 0), o.offset
            )
            if o.metadata:
                try:
                    state = json.loads(o.metadata)
                    rounds, published = int(state["round"]), int(state["published"])
                except (ValueError, KeyError, TypeError):
                    log.warning(
                        "%s[%d]: commit metadata %r is not the feeder's; ignored",
                        o.topic,
                        o.partition,
                        o.metadata[:80],
                    )
                    continue
                if rounds > self.summary.rounds:
                    self.summary.rounds, self.summary.published = rounds, published
        self.summary.resumed_rounds = self.summary.rounds
        if self.summary.rounds:
            log.info(
                "resuming after round %d (%d tasks published); re-reading the experience log",
                self.summary.rounds,
                self.summary.published,
            )
        reader.seek_to_beginning()
        self._groups.clear()
        self.summary.answered.clear()
        self.summary.observed = 0

    def _observe(self, batch: list[Envelope]) -> None:
        s = self.summary
        for env in batch:
            self._positions[(env.topic, env.partition)] = env.offset + 1
            event = env.event
            if isinstance(event, Experience):
                where = self._ours(event.task_id)
                if where is None:
                    continue
                self.selector.observe(where, event.reward)
                s.observed += 1
                seen = self._groups[event.group_id] = self._groups.get(event.group_id, 0) + 1
                if seen >= event.group_size:
                    s.answered.add(event.task_id)
            elif isinstance(event, DeadLetter) and event.source_topic == self.plan.topics.tasks:
                task_id = (event.source_key or b"").decode("utf-8", "replace")
                if self._ours(task_id) is not None:
                    s.answered.add(task_id)

    def _ours(self, task_id: str) -> int | None:
        """The row position of one of this feeder's task ids, else None."""
        parsed = parse_online_task_id(task_id)
        if parsed is None or parsed[0] != self.taskset.name:
            return None
        return self.position_of.get(parsed[2])

    def _publish_round(
        self,
        reader: EventReader,
        tx: EventWriter,
        publisher: TaskPublisher,
        metrics: MetricEmitter,
    ) -> None:
        s = self.summary
        round_index = s.rounds
        count = min(self.batch_size, self.total - s.published)
        positions = self.selector.select(count, round_index)
        rows = len(self.taskset.rows)
        tasks: list[Task] = []
        for position in positions:
            # the feeder's sequence runs on over its rounds, as a publish's runs over its epochs
            sequence = s.published + len(tasks)
            task = publisher.make_task(self.taskset, sequence // rows, position, position=sequence)
            index = self.taskset.rows[position].index
            tasks.append(
                dataclasses.replace(
                    task, task_id=online_task_id(self.taskset.name, round_index, index)
                )
            )
        state = json.dumps(
            {"round": round_index + 1, "published": s.published + len(tasks)},
            separators=(",", ":"),
        )
        while True:
            tx.begin()
            try:
                for task in tasks:
                    with publish_span(task, self.plan.topics.tasks):  # a trace per task
                        tx.send(self.plan.topics.tasks, task, key=task.task_id)
                tx.send_offset_positions(
                    reader,
                    [
                        TopicPartitionOffset(t, p, o, state)
                        for (t, p), o in sorted(self._positions.items())
                    ],
                )
                tx.commit()
                break
            except FencedError:
                raise  # another feeder took the run over: it publishes the rounds from here
            except TransportError as exc:
                # An outage, or a rebalance after one (the group moved to a new generation and
                # refused the offsets): nothing of the round is visible. Abort, let the reader
                # rejoin (one poll), and publish the same round again, within the outage window.
                tx.abort()
                kafka_outage_window(self.cfg.stack.kafka).failed(f"round {round_index}: {exc}")
                log.warning("round %d not committed (%s): publishing it again", round_index, exc)
                self._observe(reader.poll(500, timeout_s=1.0))
            except BaseException:
                tx.abort()
                raise
        s.rounds = round_index + 1
        s.published += len(tasks)
        s.rounds_this_run.append([t.index for t in tasks])
        s.observed_at_round.append(s.observed)
        predicted = getattr(self.selector, "predicted_pass_rate", None)
        values = {
            "round": float(s.rounds),
            "published_total": float(s.published),
            "answered_total": float(len(s.answered)),
            "observed_rewards_total": float(s.observed),
        }
        if predicted is not None:
            chosen = predicted()[positions]
            values["selected_predicted_pass_rate_mean"] = float(chosen.mean())
        metrics.emit(s.rounds, values)
        log.info("round %d: published rows %s", round_index, [t.index for t in tasks])
