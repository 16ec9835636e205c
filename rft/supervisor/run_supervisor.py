"""RunSupervisor: `rft run` in mode both — stack, publish, explorer + trainer processes, progress.

The supervisor owns no training state: it brings the local stack up when the config points at it,
publishes the tasksets once, has the launcher of `cluster.launcher` start the explorer and the
trainer as separate processes (here, or as Ray actors), and follows the run through the `metrics`
topic, feeding the configured sinks (`monitor.monitor_type`) and its own summary. Ctrl-C stops the
components in order; one that fails ends the run, named with the last lines of its log. At the end
the summary says how each component finished, from its newest status on the control topic: a
trainer that stopped short of total_steps (exit code SHORT_EXIT_CODE) says why, and `rft run`
exits with that code.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rft.config import RftConfig
from rft.consumers.metrics.sinks import MetricFanout, check_sinks
from rft.consumers.ops.run_status import newest_statuses
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.loop import SHORT_EXIT_CODE
from rft.errors import RftError
from rft.events.models import Metric
from rft.events.reader import Envelope, EventReader
from rft.supervisor.launchers import RunCommand, feeds_online, launcher_for
from rft.supervisor.progress_line import ProgressLine, RunProgress
from rft.tracing.setup import trace_stack_service, trace_viewer

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    wall_s: float = 0.0
    explorer_steps: int = 0
    trainer_steps: int = 0
    eval_accuracy: dict[int, float] = field(default_factory=dict)  # explorer step -> accuracy
    rollout_tokens_per_s: list[float] = field(default_factory=list)
    train_step_s: list[float] = field(default_factory=list)
    trainer_gpu_peak_gib: float = 0.0  # the largest step's peak on the trainer's GPU (0: none)
    peak_rss_bytes: int = 0
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # component -> its tree's
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # components that ended the run badly
    endings: list[str] = field(default_factory=list)  # how each component finished, as it said
    traces: str | None = None  # where a person looks at the run's spans

    @property
    def exit_code(self) -> int:
        """0; SHORT_EXIT_CODE when only the trainer failed, by stopping short; else 1."""
        if not self.failed:
            return 0
        if self.failed == ["trainer"] and self.exit_codes.get("trainer") == SHORT_EXIT_CODE:
            return SHORT_EXIT_CODE
        return 1

    def lines(self) -> list[str]:
        out = [f"wall time: {self.wall_s / 60:.1f} min"]
        out.append(f"explorer steps: {self.explorer_steps}, trainer steps: {self.trainer_steps}")
        if self.eval_accuracy:
            first, last = min(self.eval_accuracy), max(self.eval_accuracy)
            out.append(
                f"eval accuracy: {self.eval_accuracy[first]:.3f} at step {first} -> "
                f"{self.eval_accuracy[last]:.3f} at step {last}"
            )
        if self.rollout_tokens_per_s:
            out.append(
                f"rollout throughput: median {statistics.median(self.rollout_tokens_per_s):.0f} "
                "tokens/s"
            )
        if self.train_step_s:
            out.append(f"trainer step time: median {statistics.median(self.train_step_s):.1f} s")
        if self.trainer_gpu_peak_gib:
            out.append(
                f"trainer GPU memory: peak {self.trainer_gpu_peak_gib:.2f} GiB allocated by torch "
                "(its largest step)"
            )
        out.append(f"peak memory of all processes: {self.peak_rss_bytes / 2**30:.2f} GiB (host)")
        if self.cpu_seconds and self.wall_s > 0:
            # cores kept busy on average, over the run's wall time
            out.append(
                "CPU time: "
                + ", ".join(
                    f"{name} {used:.0f} s ({used / self.wall_s:.1f} cores on average)"
                    for name, used in sorted(self.cpu_seconds.items())
                )
            )
        out.extend(self.endings)
        if self.traces:
            out.append(f"traces: {self.traces}")
        out.append(f"exit codes: {self.exit_codes}")
        return out


class RunSummaryTracker:
    """Folds the run's Metric events into a RunSummary."""

    def __init__(self, summary: RunSummary) -> None:
        self.summary = summary

    def write(self, metric: Metric) -> None:
        v, s = metric.values, self.summary
        if metric.component == "explorer":
            if "eval_accuracy" in v:
                s.eval_accuracy[metric.step] = v["eval_accuracy"]
            if "rollout_tokens_per_s" in v:
                s.explorer_steps = max(s.explorer_steps, metric.step)
                s.rollout_tokens_per_s.append(v["rollout_tokens_per_s"])
        elif metric.component == "trainer" and "step_time_s" in v:
            s.trainer_steps = max(s.trainer_steps, metric.step)
            s.train_step_s.append(v["step_time_s"])
            s.trainer_gpu_peak_gib = max(s.trainer_gpu_peak_gib, v.get("gpu_peak_gib", 0.0))

    def close(self) -> None:
        pass


class RunSupervisor:
    def __init__(
        self,
        cfg: RftConfig,
        config_path: Path,
        overrides: list[str],
        run_stage: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.plan = RunPlan(cfg)
        self.config_path = config_path
        self.overrides = overrides
        self.run_stage = run_stage  # the stage of a config with `stages:` that cfg is
        self._stack_lease: object | None = None

    def ensure_stack(self) -> None:
        from rft.stack.local_stack import LocalStack
        from rft.stack.stack_lease import StackLease

        local = self.cfg.stack.local
        store = self.cfg.stack.object_store
        wanted = []
        if self.cfg.stack.kafka.bootstrap_servers == f"127.0.0.1:{local.kafka_port}":
            wanted.append("kafka")
        if store.uri is None and store.endpoint == f"127.0.0.1:{local.minio_port}":
            wanted.append("minio")  # a file:// or remote s3:// checkpoint store needs no MinIO
        traces = trace_stack_service(self.cfg)  # the run's spans go to the local trace server
        if traces is not None:
            wanted.append(traces)
        if local.auto_start and wanted:
            stack = LocalStack.from_stack_settings(self.cfg.stack)
            # a lease for as long as this process lives: a test session that started the stack
            # stops it at its end only when no other live process holds one
            self._stack_lease = StackLease(stack.layout.leases).acquire()
            result = stack.up(services=wanted)
            if result.started:
                print(f"rft run: started local stack: {', '.join(result.started)}", flush=True)

    def publish(self, republish: bool) -> None:
        from rft.events.transport import kafka_backend
        from rft.producers.task_publisher import (
            has_committed_tasks,
            load_run_tasksets,
            publish_atomically,
        )

        kafka = self.cfg.stack.kafka
        with kafka_backend(kafka).admin() as admin:
            existing = set(admin.list_topics())
        # with an online selector the feeder publishes the training tasks (and resumes itself):
        # this publish holds only the eval tasks
        tasks = self.plan.topics.eval_tasks if self.feeds_online() else self.plan.topics.tasks
        self.plan.ensure_topics()
        # publishes are atomic, so one committed task means the whole taskset is there
        if tasks in existing and not republish and has_committed_tasks(kafka, tasks):
            print(
                f"rft run: {tasks} holds the tasks an earlier run published; resuming "
                "(pass --republish to publish again)",
                flush=True,
            )
            return
        summary = publish_atomically(
            kafka,
            load_run_tasksets(self.cfg),
            self.plan.topics,
            epochs=self.cfg.buffer.total_epochs,
            seed=self.cfg.explorer.rollout_model.seed,
            transactional_id=f"{self.plan.run_id}.publisher",
        )
        for line in summary.lines():
            print(f"rft run: {line}", flush=True)

    def feeds_online(self) -> bool:
        """Whether the training taskset's selector is online: a task feeder child publishes it."""
        return feeds_online(self.cfg)

    @staticmethod
    def _feed(
        batch: list[Envelope],
        sinks: MetricFanout,
        tracker: RunSummaryTracker,
        line: ProgressLine | None = None,
    ) -> None:
        if not batch:
            return
        if line is not None:
            line.clear()  # the sinks' per-step lines print above the live line
        for env in batch:
            if isinstance(env.event, Metric):
                sinks.write(env.event)
                tracker.write(env.event)
                if line is not None:
                    line.progress.write(env.event)
        sinks.flush()
        if line is not None:
            line.show()

    def run(self, republish: bool = False) -> RunSummary:
        started = time.monotonic()
        started_ms = int(time.time() * 1000)
        check_sinks(
            self.cfg.monitor.monitor_type, self.cfg.monitor.monitor_args
        )  # before the stack
        self.ensure_stack()
        self.publish(republish)
        log_dir = Path(self.cfg.checkpoint_root_dir) / self.cfg.project / self.cfg.name / "logs"
        summary = RunSummary(traces=trace_viewer(self.cfg))
        tracker = RunSummaryTracker(summary)
        sinks = MetricFanout.for_config(self.cfg)
        line = ProgressLine(RunProgress(self.plan.total_steps))
        command = RunCommand(self.config_path, tuple(self.overrides), self.run_stage)
        try:
            group = launcher_for(self.cfg).launch(self.cfg, command, log_dir)
        except BaseException:
            sinks.close()
            raise
        metrics_group = f"{self.plan.run_id}.supervisor.{started_ms}"
        try:
            with EventReader.open(
                self.cfg.stack.kafka,
                metrics_group,
                [self.plan.topics.metrics],
                dead_letter_topic=self.plan.topics.dead_letter,
            ) as metrics:
                metrics.seek_to_timestamp(started_ms)
                while group.alive() and not group.failures():
                    self._feed(metrics.poll(100, timeout_s=1.0), sinks, tracker, line)
                    if line.live:
                        line.show()  # the ETA moves between metrics too
                # drain what the children wrote just before exiting
                self._feed(metrics.poll(500, timeout_s=2.0), sinks, tracker, line)
            line.clear()
        except KeyboardInterrupt:
            line.clear()
            print("\nrft run: interrupted, stopping explorer and trainer", flush=True)
            group.stop()
            raise
        finally:
            failures = group.failures()
            for failure in failures:
                print("\n".join(failure.lines()), file=sys.stderr, flush=True)
            group.stop()
            sinks.close()
            summary.wall_s = time.monotonic() - started
            summary.peak_rss_bytes = group.peak_rss_bytes
            summary.cpu_seconds = group.cpu_seconds()
            summary.exit_codes = group.exit_codes()
            summary.failed = sorted(
                {f.name for f in failures}
                | {name for name, code in summary.exit_codes.items() if code not in (0, None)}
            )
        summary.endings = self.endings(started_ms)
        return summary

    def endings(self, since_ms: int) -> list[str]:
        """How each component of this run finished, from its newest status since `since_ms`."""
        try:
            statuses = newest_statuses(self.cfg.stack.kafka, self.plan.topics.control)
        except RftError as exc:
            return [f"(the components' statuses could not be read: {exc})"]
        return [
            f"{s.component}: {s.detail or s.reason}"
            for s in statuses
            if s.finished and s.created_at >= since_ms
        ]
