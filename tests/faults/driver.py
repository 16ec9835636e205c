"""The fault driver: runs the RFT loop (tiny model) as separate processes on a real stack while it
injects faults at moments drawn from a printed seed, restarts what a supervisor would restart,
and hands the run to the checker (`rft.consumers.ops.run_check`), which reads the whole log afterwards.

A fault kind is one function registered in `FAULTS` (`@FAULTS.register("name")`): it gets the
running `LoopRun` and a seeded `random.Random`, waits for its moment (`run.wait_until`, which keeps
supervising meanwhile), acts, and returns one line saying what it did. A kind that must catch a
process at a named moment declares it in `PAUSE_POINTS`: the process is started with
`RFT_FAULT_PAUSE` naming that point (rft.fault_points), so it stops there for a few seconds, long
enough to be killed there.

Supervision: a component that exits without having been told to (a crash after a broker restart,
say) is restarted with the same arguments, and the exit is recorded as unplanned with its last
log line. Explorers keep their `--explorer-id` across restarts, as a supervisor would, so the new
transactional producer fences the old one's open transaction at once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.ops.run_check import RunCheck, RunChecker
from rft.consumers.run_plan import RunPlan
from rft.errors import FENCED_EXIT_CODE
from rft.events.models import now_ms
from rft.events.topics import ensure_topics
from rft.events.transport import kafka_backend
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from rft.registry import Registry
from rft.stack.local_stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
PAUSE_S = 4.0  # how long a process waits at its fault point: time to kill it there
LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"  # the time that starts a line of rft's log (rft.cli.main)
# fault kinds that must come while the explorers still explore and the trainer still reads
EARLY_KINDS = frozenset(
    {"explorer_kill_in_transaction", "explorer_kill_one_of_two", "corrupt_experience"}
)
IDLE_EXIT = "the taskset is exhausted"  # what an explorer says when it stops for want of tasks
# fault kinds that wait for a version counted from the newest one published when they begin
RELATIVE_KINDS = frozenset({"kafka_restart", "kafka_outage", "explorer_kill_one_of_two", "fence"})
# Versions a broker fault's target leaves free for each relative fault still to come: two its
# kill may land past (LoopRun.moment_after) and one for that fault's own target.
VERSIONS_PER_FAULT = 3
RESTART_LIMIT = 12  # unplanned restarts of one component before the run is given up
# Bytes that no decoder accepts: the single-object magic, a fingerprint no schema has, garbage.
CORRUPT = b"\xc3\x01" + b"\xde\xad\xbe\xef\x00\x00\x00\x00" + b"\x07corrupt"

Fault = Callable[["LoopRun", random.Random], str]
FAULTS: Registry[Fault] = Registry("fault kind")
# fault kind -> (component it pauses, the fault point it pauses at)
PAUSE_POINTS: dict[str, tuple[str, str]] = {}


class DriverError(AssertionError):
    """The run could not be driven to its end (a component kept dying, a wait ran out)."""


class RunEnded(Exception):
    """The trainer finished before a fault's moment came: the fault is skipped."""


@dataclass
class Component:
    """One process of the loop (`rft train` / `rft explore`), restartable, logging to files."""

    name: str
    args: list[str]
    logs: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    planned_stop: bool = False
    unplanned: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)  # exits on a fence (exit FENCED_EXIT_CODE)

    @property
    def log_path(self) -> Path:
        return self.logs / f"{self.name}.{self.starts}.log"

    def start(self, pauses: list[str] | None = None) -> None:
        self.starts += 1
        env = dict(self.env)
        env.pop("RFT_FAULT_PAUSE", None)
        if pauses:
            env["RFT_FAULT_PAUSE"] = ",".join(f"{p}:{PAUSE_S:g}" for p in pauses)
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rft.cli.main", *self.args],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.planned_stop = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def all_output(self) -> str:
        return "".join(
            (self.logs / f"{self.name}.{i}.log").read_text(errors="replace")
            for i in range(1, self.starts + 1)
            if (self.logs / f"{self.name}.{i}.log").exists()
        )

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.planned_stop = True
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()


@dataclass
class LoopRun:
    """One run of the loop under faults. `local` is the stack's owner when the faults may
    restart its services (a private stack); None runs on a shared stack, without such faults."""

    stack: StackSettings
    tmp: Path
    seed: int
    kinds: list[str]
    steps: int
    explorers: int = 1
    local: LocalStack | None = None
    name: str = "faults"
    # Kafka's default session timeout (45 s) is how long a killed member's partitions wait for
    # a rebalance; the short form shortens it (stack.kafka.extra) to stay within its budget
    session_timeout_ms: int | None = None
    shuffle: bool = True  # inject in a seeded order; False keeps the order of `kinds`
    client: str = "confluent"  # stack.kafka.client of every process of the run
    batch_size: int = 2  # tasks per explorer step (each rolled out 4 times)
    injected: list[tuple[str, str]] = field(default_factory=list)
    tampered: dict[int, int] = field(default_factory=dict)
    components: dict[str, Component] = field(default_factory=dict)
    corrupt_sent: Counter[str] = field(default_factory=Counter)
    pending: list[str] = field(default_factory=list)
    current: str | None = None
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.config_path = self.tmp / "run.yaml"
        self.config_path.write_text(yaml.safe_dump(self.run_config()))
        self.cfg = load_config(self.config_path)
        self.plan = RunPlan(self.cfg)
        self.logs = self.tmp / "logs"
        self.logs.mkdir(exist_ok=True)

    def run_config(self) -> dict:
        return {
            "project": "rft-faults",
            "name": self.name,
            "mode": "both",
            "checkpoint_root_dir": str(self.tmp / "ckpt"),
            "algorithm": {
                "algorithm_type": "grpo",
                "repeat_times": 4,
                "entropy_loss_fn": "default",
                "entropy_loss_fn_args": {"entropy_coef": 0.05},
            },
            "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 8},
            "buffer": {
                "batch_size": self.batch_size,
                "total_steps": self.steps,
                "explorer_input": {
                    "default_workflow_type": "math_workflow",
                    "default_reward_fn_type": "math_reward",
                    "taskset": {
                        "name": "arith",
                        "storage_type": "generator",
                        "path": "arithmetic",
                        # exactly the tasks the run needs: every one must be explored
                        "generator_args": {
                            "digits": 1,
                            "operators": ["+"],
                            "num_tasks": self.batch_size * self.steps,
                        },
                        "format": {"prompt_key": "question", "response_key": "answer"},
                    },
                },
            },
            "explorer": {"eval_on_startup": False, "eval_interval": 1000},
            "trainer": {"micro_batch_size": 4, "optim": {"lr": 1.0e-3}},
            "synchronizer": {
                "sync_style": "fixed",
                "sync_interval": 1,
                "sync_offset": 0,
                "sync_timeout": 600,
            },
            "stack": {
                "kafka": {
                    "bootstrap_servers": self.stack.kafka.bootstrap_servers,
                    "client": self.client,
                    "extra": (
                        {"session.timeout.ms": str(self.session_timeout_ms)}
                        if self.session_timeout_ms
                        else {}
                    ),
                },
                "object_store": {
                    "endpoint": self.stack.object_store.endpoint,
                    "bucket": "rft-faults",
                },
            },
        }

    # -- the run --------------------------------------------------------------------------------

    def say(self, line: str) -> None:
        print(f"[faults +{time.monotonic() - self.t0:6.1f}s] {line}", flush=True)

    def execute(self, timeout_s: float) -> RunCheck:
        """Publish, start the loop, inject every fault in `kinds` in a seeded order, wait for the
        trainer's last step, stop the explorers, and check the log. A run that fails or times out
        (pytest-timeout) kills its processes: left running, they would go on writing to the
        private stack the next test uses."""
        try:
            return self._execute(timeout_s)
        except BaseException:
            for c in self.components.values():
                if c.alive():
                    c.kill9()
            raise

    def _execute(self, timeout_s: float) -> RunCheck:
        self.t0 = time.monotonic()
        self.pending = list(self.kinds)
        if self.shuffle:
            self.rng.shuffle(self.pending)
            # kinds that need live explorers or a trainer still reading go first (stable sort)
            self.pending.sort(key=lambda kind: kind not in EARLY_KINDS)
            # the fence hands the run to a second trainer: every other fault comes before it
            self.pending.sort(key=lambda kind: kind == "fence")
        self.say(f"seed {self.seed}; faults in order: {', '.join(self.pending) or '(none)'}")
        self.deadline = time.monotonic() + timeout_s
        self.publish()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        env.update(
            RFT_S3_ENDPOINT=self.stack.object_store.endpoint,
            RFT_S3_ACCESS_KEY=self.stack.object_store.access_key,
            RFT_S3_SECRET_KEY=self.stack.object_store.secret_key,
        )
        base = ["--config", str(self.config_path)]
        self.components["trainer"] = Component("trainer", ["train", *base], self.logs, env)
        for i in range(self.explorers):
            name = f"explorer-{'ab'[i]}"
            args = ["explore", *base, "--explorer-id", name, "--idle-timeout", "300"]
            self.components[name] = Component(name, args, self.logs, env)
        for c in self.components.values():
            c.start(self.pause_for(c.name))
        while self.pending:
            kind = self.current = self.pending.pop(0)
            try:
                what = FAULTS.get(kind)(self, self.rng)
            except RunEnded:
                self.skipped.append(kind)
                self.say(f"{kind}: skipped, the trainer finished first")
                continue
            finally:
                self.current = None
            self.injected.append((kind, what))
            self.say(f"{kind}: {what}")
        self.wait_until(self.trainer_done, "the end", at_end=True)
        self.say("trainer finished; stopping the explorers")
        for c in self.components.values():
            if c.name.startswith("explorer") and c.alive():
                c.planned_stop = True
                c.signal(signal.SIGINT)
        for c in self.components.values():
            if c.proc is not None:
                try:
                    c.proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    c.kill9()
        checker = RunChecker(
            self.cfg.stack.kafka,
            self.plan.topics,
            self.plan.experience_topic,
            self.plan.explorer_group,
            self.plan.checkpoint_store(),
        )
        report = checker.check(self.tampered)
        self.say("checked")
        return report

    def publish(self) -> None:
        ensure_topics(self.cfg.stack.kafka, self.plan.topics)
        with EventWriter.open(self.cfg.stack.kafka) as writer:
            if "corrupt_task" in self.pending:
                # ahead of the tasks of one partition: an explorer meets it among them
                partition = self.rng.randrange(self.cfg.stack.kafka.partitions)
                with kafka_backend(self.cfg.stack.kafka).producer() as producer:
                    producer.produce(self.plan.topics.tasks, CORRUPT, partition=partition)
                    producer.flush()
                self.corrupt_sent[self.plan.topics.tasks] += 1
            publish_tasksets(
                TaskPublisher(writer),
                load_run_tasksets(self.cfg),
                self.plan.topics,
                epochs=1,
                seed=0,
            )

    def pause_for(self, component: str) -> list[str]:
        """The fault points where `component` must pause for the faults still to come."""
        kinds = ([self.current] if self.current else []) + self.pending
        points = [PAUSE_POINTS[k][1] for k in kinds if PAUSE_POINTS.get(k, ("",))[0] == component]
        return sorted(set(points))

    def supervise(self) -> None:
        """Restart a component that exited on its own with a failure, and an explorer that
        gave up idle (e.g. through a long rebalance) when none is left while the trainer still
        needs experiences (recorded like a failure)."""
        explorers = [c for n, c in self.components.items() if n.startswith("explorer")]
        idle = [c for c in explorers if not c.planned_stop and IDLE_EXIT in c.output()]
        if idle and not any(c.alive() for c in explorers) and not self.trainer_done():
            c = idle[0]
            last = [line for line in c.output().splitlines() if line.strip()][-1:]
            c.unplanned.append(
                f"no explorer left: {c.name} last said {last[0] if last else ''}"[:300]
            )
            self.say(f"no explorer running; restarting {c.name}")
            c.start(self.pause_for(c.name))
        for c in self.components.values():
            if c.proc is None or c.alive() or c.planned_stop:
                continue
            rc = c.proc.returncode
            if rc == 0:
                continue
            if rc == FENCED_EXIT_CODE:
                # another process holds its role: restarting it would hand the role back
                last = [line for line in c.output().splitlines() if line.strip()][-1:]
                c.fenced.append(last[0][:300] if last else "")
                c.planned_stop = True
                self.say(f"{c.name} exited fenced; not restarted: {c.fenced[-1]}")
                continue
            last = [line for line in c.output().splitlines() if line.strip()][-1:]
            c.unplanned.append(f"exit {rc}: {last[0] if last else ''}"[:300])
            self.say(f"{c.name} exited {rc} unplanned: {c.unplanned[-1]}; restarting")
            if len(c.unplanned) > RESTART_LIMIT:
                raise DriverError(f"{c.name} died {len(c.unplanned)} times:\n{c.output()[-3000:]}")
            c.start(self.pause_for(c.name))

    def trainer_done(self) -> bool:
        """A trainer of the run finished: the first one, or the one that took the run over from
        it (the fence kind; the fenced one exits with FENCED_EXIT_CODE and is not restarted)."""
        return any(
            name.startswith("trainer") and c.proc is not None and c.proc.poll() == 0
            for name, c in self.components.items()
        )

    def wait_until(
        self, ready: Callable[[], bool], what: str, at_end: bool = False, poll_s: float = 0.2
    ) -> None:
        while not ready():
            if not at_end and self.trainer_done():
                raise RunEnded(what)
            self.supervise()
            if time.monotonic() > self.deadline:
                tails = {n: c.output()[-2500:] for n, c in self.components.items()}
                raise DriverError(f"ran out of time waiting for {what}; seed {self.seed}: {tails}")
            time.sleep(poll_s)

    def restart(self, component: str) -> None:
        c = self.components[component]
        c.start(self.pause_for(component))

    def published_versions(self) -> int:
        return self.components["trainer"].all_output().count("published weight version")

    def version_times(self) -> list[float]:
        """When the trainer logged each version it published (seconds since the epoch, from the
        time that starts each line of rft's log format)."""
        return [
            datetime.strptime(line[:23], LOG_TIME).timestamp()
            for line in self.components["trainer"].all_output().splitlines()
            if "published weight version" in line
        ]

    def moment_after(self, target: int, jitter_s: float, rng: random.Random) -> None:
        """Wait for version `target`, then for a seeded moment of the step after it: a seeded
        fraction of the time the step before took (at most `jitter_s`), counted from when the
        trainer logged `target`. When the next version comes first, the same fraction of the
        step after that one; when the one after it comes first too, or there is no step after
        it in the run, at once.

        A step of the tiny model can take a third of a second: a plain 0 to `jitter_s` delay
        let a broker kill meant for v2 land after v11 (seed 1864336037), and the outages after
        it found the run at its end. Killing at once when the next version came put nearly
        every kill of a fast run just after a version was announced."""
        self.wait_until(lambda: self.published_versions() >= target, f"version {target}")
        fraction = rng.random()
        for version in (target, target + 1):
            # at the run's last version no step of it comes after
            if version >= self.steps or self._moment_after(version, fraction, jitter_s):
                return

    def _moment_after(self, version: int, fraction: float, jitter_s: float) -> bool:
        """Wait for `fraction` of the step before `version` (at most `jitter_s`) from when the
        trainer logged `version`, or for the next version: whether the moment came first."""
        times = self.version_times()
        published = times[version - 1]
        step_s = published - times[version - 2] if version >= 2 else jitter_s
        at = published + fraction * min(jitter_s, step_s)
        self.wait_until(
            lambda: time.time() >= at or self.published_versions() > version,
            f"a moment after version {version}",
            poll_s=0.05,
        )
        return time.time() >= at

    def at_point(self, component: str, point: str, occurrence: int) -> Callable[[], bool]:
        """True once the current process of `component` has paused `occurrence` more times at
        `point` from now on (it is paused right now: the kill lands there)."""
        c = self.components[component]
        marker = f"rft fault point {point}:"
        started, seen = c.starts, c.output().count(marker)

        def ready() -> bool:
            nonlocal started, seen
            if c.starts != started:  # restarted (an unplanned exit): count in the new process
                started, seen = c.starts, 0
            return c.output().count(marker) >= seen + occurrence

        return ready


# -- fault kinds ------------------------------------------------------------------------------


def _trainer_kill(point: str) -> Fault:
    def inject(run: LoopRun, rng: random.Random) -> str:
        occurrence = rng.randint(1, 2)
        trainer = run.components["trainer"]
        run.wait_until(run.at_point("trainer", point, occurrence), f"trainer at {point}")
        trainer.kill9()
        run.current = None  # done: the restarted trainer pauses only for the faults to come
        run.restart("trainer")
        return f"kill -9 at {point} (pause {occurrence}), restarted"

    return inject


TRAINER_KILL_POINTS = (
    "trainer.after_step",
    "checkpoint.upload",  # a version going up on the writer's thread, the trainer going on
    "checkpoint.before_manifest",
    "trainer.before_announce",
)
for _point in TRAINER_KILL_POINTS:
    FAULTS.add(f"trainer_kill@{_point}", _trainer_kill(_point))
    PAUSE_POINTS[f"trainer_kill@{_point}"] = ("trainer", _point)


@FAULTS.register("explorer_kill_in_transaction")
def explorer_kill_in_transaction(run: LoopRun, rng: random.Random) -> str:
    occurrence = rng.randint(1, 2)
    explorer = run.components["explorer-a"]
    run.wait_until(
        run.at_point("explorer-a", "explorer.in_transaction", occurrence), "explorer-a in its txn"
    )
    explorer.kill9()
    run.current = None
    run.restart("explorer-a")
    return f"kill -9 of explorer-a inside its transaction (step pause {occurrence}), restarted"


PAUSE_POINTS["explorer_kill_in_transaction"] = ("explorer-a", "explorer.in_transaction")


@FAULTS.register("explorer_kill_one_of_two")
def explorer_kill_one_of_two(run: LoopRun, rng: random.Random) -> str:
    victim = run.components.get("explorer-b")
    if victim is None:
        raise DriverError("explorer_kill_one_of_two needs two explorers")
    target = run.published_versions() + rng.randint(1, 2)
    run.moment_after(target, 5.0, rng)
    victim.kill9()
    at = run.published_versions()
    return (
        f"kill -9 of explorer-b after v{at} (target v{target}; explorer-a shares its group), "
        "not restarted"
    )


def _broker_down(run: LoopRun, rng: random.Random, kind: str, max_wait: int) -> str:
    """Wait for a seeded version, then kill -9 the private stack's broker; says where the kill
    landed."""
    local = run.local
    if local is None:
        raise DriverError(f"{kind} needs a private stack")
    ahead = run.published_versions()
    # Early enough that each fault still to come that counts its version from the newest one
    # finds versions left to wait for: with one version before the run's last as the only bound,
    # a late outage took the last versions and the next was skipped (seeds 999222671 and
    # 1864336037: the third of three outages in a run of 16 versions).
    later = sum(k in RELATIVE_KINDS for k in run.pending)
    last = run.steps - 1 - VERSIONS_PER_FAULT * later
    target = max(ahead + 1, min(ahead + rng.randint(1, max_wait), last))
    run.moment_after(target, 3.0, rng)
    pid = local.status().service("kafka").pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    return f"after v{run.published_versions()} (target v{target})"


def _broker_up(run: LoopRun) -> None:
    assert run.local is not None
    run.local.up(timeout_s=180, services=["kafka"])


@FAULTS.register("kafka_restart")
def kafka_restart(run: LoopRun, rng: random.Random) -> str:
    where = _broker_down(run, rng, "kafka_restart", 2)
    down_s = rng.uniform(3, 10)
    time.sleep(down_s)
    _broker_up(run)
    return f"kill -9 of the broker {where}, down {down_s:.1f}s, restarted"


@FAULTS.register("kafka_outage")
def kafka_outage(run: LoopRun, rng: random.Random) -> str:
    """A broker `kill -9` and an outage longer than the consumers' session timeout: every group
    member's session expires while the broker is away, so each group rebalances when it is back
    (the members' partitions are revoked, or lost, and assigned again)."""
    where = _broker_down(run, rng, "kafka_outage", 3)
    session_s = (run.session_timeout_ms or 45_000) / 1000
    down_s = session_s + rng.uniform(2, 8)
    time.sleep(down_s)
    _broker_up(run)
    return f"kill -9 of the broker {where}, down {down_s:.1f}s (session {session_s:g}s)"


@FAULTS.register("minio_restart")
def minio_restart(run: LoopRun, rng: random.Random) -> str:
    local = run.local
    if local is None:
        raise DriverError("minio_restart needs a private stack")
    point = "checkpoint.before_manifest"  # files uploaded, manifest not: mid-upload
    run.wait_until(run.at_point("trainer", point, 1), f"trainer at {point}")
    pid = local.status().service("minio").pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    down_s = rng.uniform(2, 8)
    time.sleep(down_s)
    local.up(timeout_s=180, services=["minio"])
    return f"kill -9 of MinIO while the trainer uploaded a version, down {down_s:.1f}s, restarted"


PAUSE_POINTS["minio_restart"] = ("trainer", "checkpoint.before_manifest")


@FAULTS.register("corrupt_task")
def corrupt_task(run: LoopRun, rng: random.Random) -> str:
    return "a corrupt record written to the tasks topic among the published tasks"


@FAULTS.register("corrupt_experience")
def corrupt_experience(run: LoopRun, rng: random.Random) -> str:
    target = rng.randint(1, 2)
    run.wait_until(lambda: run.published_versions() >= target, f"version {target}")
    if run.trainer_done():
        raise RunEnded("no trainer left to read it")
    partition = rng.randrange(run.cfg.stack.kafka.partitions)
    with kafka_backend(run.cfg.stack.kafka).producer() as producer:
        producer.produce(run.plan.experience_topic, CORRUPT, partition=partition)
        producer.flush()
    run.corrupt_sent[run.plan.experience_topic] += 1
    return f"a corrupt record written to {run.plan.experience_topic}[{partition}]"


@FAULTS.register("checkpoint_flip")
def checkpoint_flip(run: LoopRun, rng: random.Random) -> str:
    """Flip one byte of a published version that explorers have moved past (two behind the
    newest announced: with sync_interval 1 no explorer generates on it any more)."""
    run.wait_until(lambda: run.published_versions() >= 3, "three versions")
    store = run.plan.checkpoint_store()
    newest = store.latest_version()
    version = newest - 2
    manifest = store.read_manifest(version)
    entry = max(
        (f for f in manifest.files if not f.name.startswith("trainer_state/")),
        key=lambda f: f.size,
    )
    key = store.file_key(version, entry.name)
    data = bytearray(store.store.get_bytes(key))
    at = rng.randrange(len(data))
    data[at] ^= 0x01
    run.tampered[version] = now_ms()
    store.store.put_bytes(key, bytes(data))
    return f"flipped byte {at} of v{version}/{entry.name} (newest v{newest})"


@FAULTS.register("fence")
def fence(run: LoopRun, rng: random.Random) -> str:
    """SIGSTOP the trainer, start a second one on the run, let it publish, SIGCONT the first.
    The second fences the first, which must publish nothing after it resumes (the checker would
    see a fork, a version written twice or an experience trained twice)."""
    trainer = run.components["trainer"]
    target = run.published_versions() + 1
    run.wait_until(lambda: run.published_versions() >= target, f"version {target}")
    trainer.signal(signal.SIGSTOP)
    second = Component("trainer-2", list(trainer.args), run.logs, dict(trainer.env))
    run.components["trainer-2"] = second
    second.start()
    run.wait_until(
        lambda: "published weight version" in second.output() or not second.alive(),
        "the second trainer's first version",
    )
    trainer.signal(signal.SIGCONT)
    # the two now race; the run ends when the first one does
    return "SIGSTOP trainer, second trainer started and published, SIGCONT"


def fault_table(run: LoopRun, report: RunCheck) -> list[str]:
    """The printed summary: seed, faults by kind, unplanned exits, corrupt records, checker."""
    out = [f"seed: {run.seed}", "faults injected by kind:"]
    for kind, n in sorted(Counter(k for k, _ in run.injected).items()):
        out.append(f"  {kind:<45} {n}")
    for kind, what in run.injected:
        out.append(f"    {kind}: {what}")
    out += [f"  skipped (the run ended first): {k}" for k in run.skipped]
    out.append("unplanned exits (restarted by the driver):")
    for c in run.components.values():
        out.append(f"  {c.name:<45} {len(c.unplanned)}")
        out += [f"    {u}" for u in c.unplanned]
    out.append("exits on a fence (not restarted):")
    for c in run.components.values():
        out += [f"  {c.name:<45} {f}" for f in c.fenced]
    out.append("corrupt records written:")
    out += [f"  {t:<45} {n}" for t, n in sorted(run.corrupt_sent.items())]
    return out + report.table()
