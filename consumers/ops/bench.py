"""Bench: `mode: bench` evaluates a run's checkpoint versions on its eval tasksets; it never trains.

Which versions: every verified version in the run's checkpoint store plus version 0 (the base
model); only the newest with `explorer.bench_on_latest_checkpoint: true`; or an explicit list.
Each version is downloaded (sizes and sha256 verified against its manifest), loaded into one
rollout engine and evaluated like an explorer evaluates (`rft.consumers.explorer.evaluation`). Every evaluated
version becomes one Metric event (component `bench`, step = version) on the `metrics` topic, and
the report prints a table of accuracy by version and eval taskset. A version that fails
verification is refused, named in the report, and gets no metric.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from rft.config import RftConfig
from rft.consumers.explorer.evaluation import eval_params, evaluate_tasksets, read_eval_tasks
from rft.consumers.explorer.weight_follower import load_version
from rft.consumers.run_plan import RunPlan
from rft.engines.rollout import RolloutEngine, create_rollout_engine
from rft.errors import CheckpointError, ConfigError
from rft.events.writer import EventWriter
from rft.producers.metric_emitter import MetricEmitter
from rft.producers.task_publisher import (
    has_committed_tasks,
    load_run_tasksets,
    publish_atomically,
)
from rft.producers.taskset_reader import load_taskset
from rft.storage.checkpoint_store import BASE_VERSION

log = logging.getLogger(__name__)

COMPONENT = "bench"


def select_versions(
    available: list[int], *, latest_only: bool, requested: list[int] | None = None
) -> list[int]:
    """The versions to evaluate, ascending; `available` are the store's verified-manifest ones.

    `requested` (an explicit list) wins over `latest_only`; each requested version must be 0 or
    available. Without either: 0 and every available version.
    """
    if requested is not None:
        unknown = sorted(set(requested) - set(available) - {BASE_VERSION})
        if unknown:
            raise ConfigError(
                f"bench versions {unknown} are not in the checkpoint store (versions there: "
                f"{available or 'none'}; 0 is the base model)"
            )
        return sorted(set(requested))
    if latest_only:
        return [available[-1] if available else BASE_VERSION]
    return [BASE_VERSION, *available]


@dataclass
class BenchReport:
    """Accuracy by version and eval taskset, and the versions that could not be loaded."""

    run: str
    accuracy: dict[int, dict[str, float]] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)  # rollouts scored per taskset
    refused: dict[int, str] = field(default_factory=dict)

    def table(self) -> str:
        """Accuracy per version (rows) and eval taskset (columns), with the mean first."""
        names = sorted(self.tasks)
        headers = ["version", "mean"] + [f"{n} ({self.tasks[n]})" for n in names]
        rows = []
        for version in sorted(set(self.accuracy) | set(self.refused)):
            label = f"{version} (base)" if version == BASE_VERSION else str(version)
            if version in self.refused:
                rows.append([label, "refused"] + [""] * len(names))
                continue
            acc = self.accuracy[version]
            mean = sum(acc.values()) / len(acc) if acc else float("nan")
            rows.append([label, f"{mean:.3f}"] + [f"{acc.get(n, float('nan')):.3f}" for n in names])
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        lines = [f"== bench {self.run}: eval accuracy by weight version"]
        lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines += [f"version {v} refused: {why}" for v, why in sorted(self.refused.items())]
        return "\n".join(line.rstrip() for line in lines)


class Bench:
    def __init__(
        self,
        cfg: RftConfig,
        *,
        versions: list[int] | None = None,
        engine: RolloutEngine | None = None,
    ) -> None:
        """`engine`, if given, must hold the base model: versions are evaluated in ascending
        order, version 0 first."""
        if not cfg.buffer.explorer_input.eval_tasksets:
            raise ConfigError(
                "bench: buffer.explorer_input.eval_tasksets is empty; there is nothing to evaluate"
            )
        self.cfg = cfg
        self.plan = RunPlan(cfg)
        self.versions = versions
        self._engine = engine
        if versions is not None and cfg.explorer.bench_on_latest_checkpoint:
            log.warning(
                "bench: the versions asked for (%s) are evaluated; "
                "explorer.bench_on_latest_checkpoint does not apply to an explicit list",
                versions,
            )

    def run(self) -> BenchReport:
        kafka, topics = self.cfg.stack.kafka, self.plan.topics
        self.plan.ensure_topics()
        self.ensure_eval_tasks()
        store = self.plan.checkpoint_store()
        versions = select_versions(
            store.list_versions(),
            latest_only=self.cfg.explorer.bench_on_latest_checkpoint,
            requested=self.versions,
        )
        eval_tasks = read_eval_tasks(
            kafka,
            topics.eval_tasks,
            f"{self.plan.run_id}.bench-reader.{os.getpid()}",
            expect_tasks=True,
            dead_letter_topic=topics.dead_letter,
        )
        if not eval_tasks:
            raise ConfigError(f"bench: no eval tasks arrived from {topics.eval_tasks}")
        log.info("bench %s: versions %s on %s", self.plan.run_id, versions, sorted(eval_tasks))
        report = BenchReport(self.plan.run_id)
        engine = self._engine or self._build_engine()
        auxiliary = self.plan.auxiliary_models()  # a judge reward asks one; frozen across versions
        try:
            with EventWriter.open(kafka) as writer:
                metrics = MetricEmitter(writer, topics.metrics, COMPONENT, self.plan.run_id)
                for version in versions:
                    if version != BASE_VERSION:
                        try:
                            load_version(engine, store, version)
                        except CheckpointError as exc:
                            report.refused[version] = str(exc)
                            log.error("bench: weight version %d refused: %s", version, exc)
                            continue
                    result = evaluate_tasksets(
                        engine,
                        eval_tasks,
                        eval_params(self.cfg.model),
                        at=f"version {version}",
                        auxiliary_models=auxiliary,
                    )
                    metrics.emit(version, result.metric_values())
                    report.accuracy[version] = result.accuracy
                    report.tasks = result.tasks
        finally:
            auxiliary.close()
        return report

    def ensure_eval_tasks(self) -> None:
        """Publish the eval tasksets when the run's eval-tasks topic holds none.

        When the run's tasks were never published either, every taskset is published (as `rft
        run` would, under the same transactional id), so a later `rft run` of this config finds
        its tasks and publishes nothing twice.
        """
        kafka, topics = self.cfg.stack.kafka, self.plan.topics
        if has_committed_tasks(kafka, topics.eval_tasks):
            return
        if has_committed_tasks(kafka, topics.tasks):
            tasksets = [
                load_taskset(t, is_eval=True) for t in self.cfg.buffer.explorer_input.eval_tasksets
            ]
        else:
            tasksets = load_run_tasksets(self.cfg)
        summary = publish_atomically(
            kafka,
            tasksets,
            topics,
            epochs=self.cfg.buffer.total_epochs,
            seed=self.cfg.explorer.rollout_model.seed,
            transactional_id=f"{self.plan.run_id}.publisher",
        )
        for line in summary.lines():
            log.info("bench published %s", line)

    def _build_engine(self) -> RolloutEngine:
        return create_rollout_engine(
            self.cfg.explorer.rollout_model.engine_type, self.plan.rollout_engine_config()
        )
