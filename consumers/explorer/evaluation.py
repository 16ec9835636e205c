"""Evaluation of a rollout engine on a run's eval tasksets: reading them from the `eval-tasks`
topic, rolling each task out greedily once, and scoring the replies.

Explorers evaluate every `explorer.eval_interval` steps; `mode: bench` evaluates checkpoint
versions. Both use these functions, so their accuracies are the same measure.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from rft.config.connections import KafkaSettings
from rft.config.schema import ModelConfig
from rft.engines.auxiliary_models import AuxiliaryModels
from rft.engines.rollout import RolloutEngine, SamplingParams
from rft.events.models import Task
from rft.events.reader import EventReader
from rft.events.topic_end import reached, topic_ends
from rft.workflows.runner import WorkflowResult, run_workflows, split_runnable

log = logging.getLogger(__name__)


def correctness(results: list[WorkflowResult]) -> np.ndarray:
    """1.0 per correct trajectory: the reward's `correct` info where given, else the reward."""
    return np.array(
        [float(t.info.get("correct", t.reward)) for res in results for t in res.trajectories],
        dtype=np.float64,
    )


def read_eval_tasks(
    kafka: KafkaSettings,
    topic: str,
    group: str,
    *,
    expect_tasks: bool,
    timeout_s: float = 60.0,
    quiet_s: float = 2.0,
    dead_letter_topic: str | None = None,
) -> dict[str, list[Task]]:
    """Every Task on the eval topic, by taskset in published order, read to its end once.

    The topic is published before anyone evaluates, so its end is the one it has when this
    starts (rft.events.topic_end), or, where the client does not report a position there, where
    it stays quiet for `quiet_s`. With `expect_tasks`, an empty topic is waited on until
    `timeout_s`. An undecodable record is parked in `dead_letter_topic` (if given) and the rest
    is read.
    """
    found: dict[str, list[Task]] = {}
    ends = topic_ends(kafka, [topic])
    if not ends and not expect_tasks:
        return found
    with EventReader.open(
        kafka, group, [topic], from_beginning=True, dead_letter_topic=dead_letter_topic
    ) as reader:
        quiet_since = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = reader.poll(500, timeout_s=1.0)
            for env in got:
                if isinstance(env.event, Task):
                    found.setdefault(env.event.taskset, []).append(env.event)
            if ends and reached(reader, ends):
                break
            if got:
                quiet_since = None
            elif found or not expect_tasks:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > quiet_s:
                    break
    # read partition by partition; evaluated in the order they were published (file order)
    return {name: sorted(tasks, key=lambda t: t.published_order) for name, tasks in found.items()}


@dataclass(frozen=True)
class EvalResult:
    """Accuracy per eval taskset of one engine state (its weights version)."""

    model_version: int
    accuracy: dict[str, float]
    tasks: dict[str, int]  # rollouts scored per taskset

    def metric_values(self) -> dict[str, float]:
        """The values of the eval Metric event: per-taskset and mean accuracy, model version."""
        mean = float(np.mean(list(self.accuracy.values()))) if self.accuracy else float("nan")
        return (
            {f"eval/{name}/accuracy": acc for name, acc in self.accuracy.items()}
            | {"eval_accuracy": mean}
            | {"model_version": float(self.model_version)}
        )


def eval_params(model: ModelConfig) -> SamplingParams:
    """Greedy, one rollout per task, under the model section's sampling limits (response length,
    repetition penalty, minimum length): the same for explorers and bench."""
    return SamplingParams(
        max_tokens=model.max_response_tokens,
        temperature=0.0,
        n=1,
        repetition_penalty=model.repetition_penalty,
        min_tokens=model.min_response_tokens,
    )


def evaluate_tasksets(
    engine: RolloutEngine,
    eval_tasks: dict[str, list[Task]],
    params: SamplingParams,
    *,
    at: str,
    auxiliary_models: AuxiliaryModels | None = None,
) -> EvalResult:
    """Accuracy of `engine` on each taskset under `params` (see `eval_params`), the workflows
    holding `auxiliary_models` (a judge reward asks one); `at` says when, for the log lines."""
    accuracy: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, tasks in sorted(eval_tasks.items()):
        runnable, _ = split_runnable(tasks)
        started = time.monotonic()
        results = run_workflows(runnable, engine, params, auxiliary_models)
        correct = correctness(results)
        accuracy[name] = float(correct.mean()) if correct.size else 0.0
        counts[name] = int(correct.size)
        log.info(
            "eval %s at %s (weights v%d): accuracy %.3f on %d tasks (%.1fs)",
            name,
            at,
            engine.model_version,
            accuracy[name],
            len(correct),
            time.monotonic() - started,
        )
    return EvalResult(engine.model_version, accuracy, counts)
