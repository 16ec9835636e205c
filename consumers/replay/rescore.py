"""Re-scoring of logged experiences with another reward function; no model is loaded.

A reward function needs the task's raw row, which experiences do not carry: they carry `task_id`,
and the run's task topics (`<project>.<name>.tasks` and `.eval-tasks`) hold every Task with its
payload under that id. `TaskIndex.read` reads those topics to their end once (memory grows with
the number of tasks, not of experiences); `task_topics_for` says which topics a source topic's run
has. Each experience is then scored as its workflow scores a reply (the workflow's reply prefix
plus `response_text`, with the arguments the workflow derives from the task's format, such as
`answer_key`, kept where the new function accepts them, then `--reward-args`), and written to a
new topic with:

- `reward` the new reward, `token_rewards` cleared (they belonged to the old reward);
- `info` the old entries updated with the new function's, plus `rescore.source`
  (`topic[partition]@offset` of the original), `rescore.reward_fn` and `rescore.original_reward`.

Every other field, the experience id and group id included, is kept, so a trainer reading the new
topic forms the same rollout groups.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rft.config.connections import KafkaSettings
from rft.consumers.replay.filter import ExperienceFilter
from rft.consumers.replay.topic_range import RangeReader
from rft.errors import ConfigError, ReplayError, RftError
from rft.events.models import Experience, Task
from rft.events.reader import Envelope
from rft.events.topics import TopicNames
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.registry import unknown_arguments
from rft.rewards import REWARD_FUNCTIONS, RewardFn

log = logging.getLogger(__name__)

SOURCE_KEY = "rescore.source"
REWARD_FN_KEY = "rescore.reward_fn"
ORIGINAL_REWARD_KEY = "rescore.original_reward"

# reward fns take the reply and the task row positionally; the rest are keywords
_FIXED_ARGS = frozenset({"response_text", "task_payload"})


def task_topics_for(experience_topic: str, run_topics: TopicNames | None = None) -> list[str]:
    """The task topics of the run an experience topic belongs to: the run's own when known
    (`run_topics`, from a config), else `<project>.<name>.tasks` / `.eval-tasks` when the topic is
    named `<project>.<name>.<suffix>`; [] when neither tells."""
    if run_topics is not None:
        return [run_topics.tasks, run_topics.eval_tasks]
    parts = experience_topic.split(".")
    if len(parts) != 3:
        return []
    try:
        names = TopicNames.for_run(parts[0], parts[1])
    except ConfigError:
        return []
    return [names.tasks, names.eval_tasks]


class TaskIndex:
    """task_id -> Task, from task topics read to their end."""

    def __init__(self, tasks: Mapping[str, Task], topics: Sequence[str]) -> None:
        self._tasks = dict(tasks)
        self.topics = list(topics)

    @classmethod
    def read(cls, kafka: KafkaSettings, topics: Sequence[str]) -> TaskIndex:
        """Every Task in those of `topics` that exist; ReplayError when none does."""
        with kafka_backend(kafka).admin() as admin:
            existing = set(admin.list_topics())
        present = [t for t in topics if t in existing]
        if not present:
            raise ReplayError(
                f"no task topic to re-score with: {', '.join(topics) or 'none given'} "
                "(name them with --tasks-topic)"
            )
        tasks: dict[str, Task] = {}
        with RangeReader.open(kafka, present) as reader:
            for batch in reader.batches():
                for env in batch:
                    if isinstance(env.event, Task):
                        tasks[env.event.task_id] = env.event
        log.info("read %d task(s) from %s", len(tasks), ", ".join(present))
        return cls(tasks, present)

    def __len__(self) -> int:
        return len(self._tasks)

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)


class Rescorer:
    """Scores experiences with the reward fn registered as `reward_fn`."""

    def __init__(self, reward_fn: str, reward_args: Mapping[str, Any] | None = None) -> None:
        self.name = reward_fn
        self.fn: RewardFn = REWARD_FUNCTIONS.get(reward_fn, key="--reward-fn")
        if REWARD_FUNCTIONS.spec(reward_fn).asks_model is not None:
            raise ConfigError(
                f"--reward-fn: {reward_fn} asks an auxiliary model, and rescore holds none "
                "(auxiliary models are an explorer's: explorer.auxiliary_models)"
            )
        self.args = dict(reward_args or {})
        self._workflows: dict[str, Any] = {}
        unknown, accepted = unknown_arguments(self.fn, self.args, _FIXED_ARGS)
        if unknown:
            raise ConfigError(
                f"--reward-args: {reward_fn} takes no {', '.join(sorted(unknown))} "
                f"(it takes: {', '.join(accepted) or 'nothing'})"
            )

    def _task_args(self, workflow: Any, task: Task) -> dict[str, Any]:
        derived = workflow.reward_args(task)
        unknown, _ = unknown_arguments(self.fn, derived, _FIXED_ARGS)
        return {k: v for k, v in derived.items() if k not in unknown}

    def rescore(self, exp: Experience, task: Task, source: str) -> Experience:
        """`exp` with this function's reward for `task`; `source` is where `exp` was read."""
        from rft.workflows.runner import workflow_for  # the explorer's choice of workflow

        workflow = workflow_for(task, self._workflows)
        text = workflow.reply_prefix(task) + exp.response_text
        args = self._task_args(workflow, task) | self.args
        try:
            reward, info = self.fn(text, task.payload, **args)
            reward = float(reward)
        except (RftError, ValueError, TypeError, KeyError) as exc:
            raise ReplayError(
                f"{source}: {self.name} failed on task {task.task_id}: {exc}"
            ) from exc
        new_info = dict(exp.info) | {k: str(v) for k, v in info.items()}
        new_info |= {
            SOURCE_KEY: source,
            REWARD_FN_KEY: self.name,
            ORIGINAL_REWARD_KEY: repr(exp.reward),
        }
        if not math.isfinite(reward):
            log.warning("%s: %s gave a non-finite reward %r", source, self.name, reward)
        return dataclasses.replace(exp, reward=reward, token_rewards=None, info=new_info)


@dataclass
class RescoreSummary:
    events: int = 0
    written: int = 0
    other_events: int = 0
    missing_tasks: int = 0
    changed: int = 0  # experiences whose reward differs from the original
    reward_before: float = 0.0  # sums, for the means below
    reward_after: float = 0.0
    seconds: float = 0.0

    def means(self) -> tuple[float, float]:
        n = max(self.written, 1)
        return self.reward_before / n, self.reward_after / n


class Progress(Protocol):
    def update(self, done: int) -> None: ...


def source_of(env: Envelope) -> str:
    return f"{env.topic}[{env.partition}]@{env.offset}"


class ReadCounts(Protocol):
    events: int
    other_events: int


def kept_experiences(
    reader: RangeReader,
    keep: ExperienceFilter,
    counts: ReadCounts,
    progress: Progress | None = None,
) -> Iterator[tuple[Envelope, Experience]]:
    """The experiences of `reader`'s range that `keep` accepts, with their envelopes; every
    event read and every event that is not an Experience counted in `counts`."""
    for batch in reader.batches():
        counts.events += len(batch)
        for env in batch:
            if not isinstance(env.event, Experience):
                counts.other_events += 1
            elif keep.accepts(env.event):
                yield env, env.event
        if progress is not None:
            progress.update(reader.done)


def rescore_experiences(
    reader: RangeReader,
    tasks: TaskIndex,
    rescorer: Rescorer,
    writer: EventWriter,
    target: str,
    keep: ExperienceFilter | None = None,
    *,
    skip_missing_tasks: bool = False,
    progress: Progress | None = None,
) -> RescoreSummary:
    """Re-score the experiences of `reader`'s range that `keep` accepts into `target`."""
    keep = keep or ExperienceFilter()
    summary = RescoreSummary()
    started = time.monotonic()
    for env, exp in kept_experiences(reader, keep, summary, progress):
        task = tasks.get(exp.task_id)
        if task is None:
            if skip_missing_tasks:
                summary.missing_tasks += 1
                continue
            raise ReplayError(
                f"{source_of(env)}: task {exp.task_id!r} is in none of "
                f"{', '.join(tasks.topics)} (name the run's task topic with --tasks-topic, "
                "or pass --skip-missing-tasks)"
            )
        scored = rescorer.rescore(exp, task, source_of(env))
        writer.send(target, scored, key=exp.task_id)
        summary.written += 1
        summary.changed += scored.reward != exp.reward
        summary.reward_before += exp.reward
        summary.reward_after += scored.reward
    writer.flush()
    summary.seconds = time.monotonic() - started
    return summary
