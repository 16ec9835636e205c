"""Explorer groups on the real broker.

- The transport: members with cooperative-sticky rebalancing hand over only the partitions that
  move (and say which), and a static member restarted within the session timeout takes its own
  partitions back without moving anyone else's.
- The explorers: on one task topic, a sharing group of two processes (same `explorer.name`) and a
  shadow group (`explorer.name: shadow`, `explorer.experiences_to: own`). Both groups see every
  task; the sharing group explores each task exactly once in the committed log even though one of
  its members is killed with SIGKILL while its step's transaction is open; the shadow group's
  experiences stay on its own topic and never reach the trainer, whose metrics break its rows down
  by explorer. `rft status` on the live run shows both groups and both live explorers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import KafkaSettings, StackSettings
from rft.consumers.ops.run_status import read_run_status
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, Metric, Task
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.integration.test_rft_loop import read_all, run_config
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

TASKS = 96

COOPERATIVE = {"partition.assignment.strategy": "cooperative-sticky"}


def wait_until(what: str, check, timeout_s: float = 90.0, logs: tuple[Path, ...] = ()) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {log.name}:\n{log.read_text()[-4000:]}" for log in logs)
            raise AssertionError(f"{what} did not happen in {timeout_s}s{tails}")


def member(kafka: KafkaSettings, group: str, topic: str, instance: str) -> EventReader:
    return EventReader.open(
        kafka,
        group,
        [topic],
        config={**COOPERATIVE, "group.instance.id": instance, "session.timeout.ms": 30_000},
    )


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_cooperative_static_members_move_only_what_must_move(
    stack: StackSettings, unique: str, client: str
) -> None:
    kafka = dataclasses.replace(stack.kafka, client=client)
    topic, group = f"{unique}.tasks", f"{unique}.explorer.main"
    ensure_topics(kafka, [topic], partitions={topic: 4})
    with EventWriter.open(kafka) as w:
        for i in range(8):
            w.send(topic, Task(f"t{i}", "s", 0, i, {"q": i}), key=f"t{i}")
    with ExitStack() as live:
        first = live.enter_context(member(kafka, group, topic, "m1"))
        wait_until(
            "the first member holds every partition",
            lambda: first.poll(10, 0.5) is not None and len(first.assignment()) == 4,
        )
        assert first.take_revoked() == set()
        second = member(kafka, group, topic, "m2")

        def split() -> bool:
            first.poll(10, 0.2)
            second.poll(10, 0.2)
            return len(first.assignment()) == 2 and len(second.assignment()) == 2

        wait_until("the two members split the partitions", split)
        moved = set(second.assignment())
        # cooperative: the first member gave up exactly what moved, and kept the rest throughout
        assert first.take_revoked() == moved
        kept = set(first.assignment())
        assert kept.isdisjoint(moved) and len(kept | moved) == 4
        # a static member that closes does not leave its group: restarted with its instance id
        # within the session timeout, it gets its own partitions back and nothing else moves
        second.close()
        again = live.enter_context(member(kafka, group, topic, "m2"))
        wait_until(
            "the restarted member holds its partitions",
            lambda: again.poll(10, 0.5) is not None and set(again.assignment()) == moved,
        )
        for _ in range(5):
            first.poll(10, 0.2)
        assert first.take_revoked() == set() and set(first.assignment()) == kept


def group_config(stack: StackSettings, name: str, tmp: Path) -> dict:
    cfg = run_config(stack, name, tmp, "trainer_driven", 1)
    cfg["algorithm"]["repeat_times"] = 2
    # all the tasks' steps (more is refused at load): members share the tasks, so each runs out
    # before its own total_steps and stops when they are used up
    cfg["buffer"]["total_steps"] = TASKS // cfg["buffer"]["batch_size"]
    cfg["buffer"]["explorer_input"]["taskset"]["generator_args"]["num_tasks"] = TASKS
    cfg["explorer"]["max_explorers"] = 2
    # a SIGKILLed member's partitions move after the session timeout, and its open transaction
    # is aborted by the broker after the transaction timeout: both short, so the test is
    cfg["stack"]["kafka"]["extra"] = {"session.timeout.ms": 8000, "transaction.timeout.ms": 10000}
    return cfg


def start(argv: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "RFT_NUM_THREADS": "1"}
    out = log.open("w")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)


def rft(*args: str) -> list[str]:
    return [sys.executable, "-m", "rft.cli.main", *args]


def committed_experiences(cfg, topic: str, group: str, uncommitted: bool = False) -> list:
    config = {"isolation.level": "read_uncommitted"} if uncommitted else None
    got = read_topic(cfg.stack.kafka, topic, group, config=config)
    return [e.event for e in got if isinstance(e.event, Experience)]


@pytest.mark.faults
@pytest.mark.slow  # three explorer processes, one killed, and a trainer: in `make test-faults`
def test_sharing_and_shadow_groups_on_one_task_topic_with_a_member_killed(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    sharing_path = tmp_path / "run.yaml"
    sharing = group_config(stack, unique, tmp_path)
    sharing_path.write_text(yaml.safe_dump(sharing))
    shadow = group_config(stack, unique, tmp_path)
    shadow["mode"] = "explore"
    shadow["explorer"] |= {"name": "shadow", "experiences_to": "own", "tasks_from": "earliest"}
    shadow_path = tmp_path / "shadow.yaml"
    shadow_path.write_text(yaml.safe_dump(shadow))
    cfg, shadow_cfg = load_config(sharing_path), load_config(shadow_path)
    plan, shadow_plan = RunPlan(cfg), RunPlan(shadow_cfg)
    assert plan.feeds_trainer and not shadow_plan.feeds_trainer
    assert shadow_plan.explorer_experience_topic == f"{plan.topics.experiences}.shadow"
    plan.ensure_topics()
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )

    marker = tmp_path / "open-transaction"

    # the members roll out longer replies than the shadow (their own config, same group), so the
    # tasks last until the second one has joined
    slow = {**sharing, "model": {**sharing["model"], "max_response_tokens": 64}}
    slow_path = tmp_path / "slow.yaml"
    slow_path.write_text(yaml.safe_dump(slow))

    def member_process(
        who: str, hang_at: int, wait_for: str, idle_s: int, hold: str, config: Path = slow_path
    ) -> subprocess.Popen:
        argv = [sys.executable, "-m", "tests.integration.hanging_explorer", str(config)]
        argv += [who, str(hang_at), str(marker), wait_for, str(idle_s), hold]
        return start(argv, tmp_path / f"{who}.log")

    # a and b join together (each waits for the other's start-up) and split the partitions; a is
    # held inside its second step's transaction and killed there. b, and the shadow after its
    # first step, wait (live, no transaction open) until the status is read: explorers finish
    # their tasks within seconds on a fast machine.
    victim = member_process("a", hang_at=2, wait_for="ready:b", idle_s=120, hold="none")
    survivor = member_process("b", hang_at=0, wait_for="ready:a", idle_s=45, hold="after-marker")
    shadow_proc = member_process(
        "s", hang_at=0, wait_for="none", idle_s=600, hold="second-step", config=shadow_path
    )
    procs = [victim, survivor, shadow_proc]
    try:
        logs = tuple(tmp_path / f"{who}.log" for who in ("a", "b", "s"))
        wait_until("explorer a opened its second transaction", marker.exists, 300, logs)
        victim.send_signal(signal.SIGKILL)  # mid-batch: its step's records sit in an open txn
        victim.wait(timeout=30)

        def both_groups_live() -> bool:
            status = read_run_status(cfg.stack.kafka, plan.topics, plan.experience_topic)
            by_id = {e.explorer_id: e for e in status.explorers}
            return all(
                who in by_id and by_id[who].live and by_id[who].metric_version is not None
                for who in ("b", "s")
            )

        wait_until("both groups' explorers live with a step metric", both_groups_live, 180, logs)
        shown = subprocess.run(
            rft("status", "--config", str(sharing_path)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        as_json = subprocess.run(
            rft("status", "--config", str(sharing_path), "--json"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        print(shown.stdout)  # the live status of a run with two explorer groups (-s shows it)
        (tmp_path / "status.txt").write_text(shown.stdout)
        assert shown.returncode == 0 and as_json.returncode == 0, shown.stderr + as_json.stderr
        status = json.loads(as_json.stdout)
        groups = {g["group_id"]: g for g in status["groups"]}
        assert {plan.explorer_group, shadow_plan.explorer_group} <= set(groups)
        for group in (plan.explorer_group, shadow_plan.explorer_group):
            assert groups[group]["partitions"], group  # lag per partition, for both groups
        by_id = {e["explorer_id"]: e for e in status["explorers"]}
        assert by_id["b"]["group"] == plan.explorer_group
        assert by_id["s"]["group"] == shadow_plan.explorer_group
        assert by_id["s"]["experience_topic"] == shadow_plan.explorer_experience_topic
        assert shadow_plan.explorer_experience_topic in {t["topic"] for t in status["topics"]}
        Path(f"{marker}.release").write_text("status read\n")

        assert survivor.wait(timeout=420) == 0, (tmp_path / "b.log").read_text()[-3000:]
        # the shadow runs its total_steps over its own copy of the stream and stops
        assert shadow_proc.wait(timeout=300) == 0, (tmp_path / "s.log").read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    trained_topic = committed_experiences(cfg, plan.experience_topic, f"{unique}-check")
    # the sharing group: every task explored exactly once (one rollout group) in the committed log
    groups_of: dict[str, set[str]] = {}
    for e in trained_topic:
        assert e.explorer_group == plan.explorer_group  # nothing of the shadow group reached it
        groups_of.setdefault(e.task_id, set()).add(e.group_id)
    assert len(groups_of) == TASKS and all(len(g) == 1 for g in groups_of.values())
    assert {e.explorer_id for e in trained_topic} == {"a", "b"}
    # what the killed member had in its open transaction was aborted, and explored again by b
    in_flight = {
        e.task_id
        for e in committed_experiences(
            cfg, plan.experience_topic, f"{unique}-dirty", uncommitted=True
        )
        if e.explorer_id == "a"
    } - {e.task_id for e in trained_topic if e.explorer_id == "a"}
    assert in_flight and all(
        {e.explorer_id for e in trained_topic if e.task_id == t} == {"b"} for t in in_flight
    )
    # the shadow group: its own full copy of the stream, on its own topic
    shadowed = committed_experiences(
        cfg, shadow_plan.explorer_experience_topic, f"{unique}-shadow-check"
    )
    shadow_groups: dict[str, set[str]] = {}
    for e in shadowed:
        assert (e.explorer_id, e.explorer_group) == ("s", shadow_plan.explorer_group)
        shadow_groups.setdefault(e.task_id, set()).add(e.group_id)
    assert len(shadow_groups) == TASKS and all(len(g) == 1 for g in shadow_groups.values())
    assert set(groups_of) == set(shadow_groups)

    # the trainer reads the sharing group's rows only, and its metrics say whose they were
    trained = subprocess.run(
        rft("train", "--config", str(sharing_path), "--override", "trainer.total_steps=2"),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RFT_NUM_THREADS": "1"},
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    metrics = [
        m
        for m in read_all(cfg, plan.topics.metrics, f"{unique}-metrics")
        if isinstance(m, Metric) and m.component == "trainer" and "step_time_s" in m.values
    ]
    assert len(metrics) == 2
    per_step = cfg.buffer.train_batch_size
    for m in metrics:
        by_explorer = {k: v for k, v in m.values.items() if k.startswith("experiences/")}
        by_group = {k: v for k, v in m.values.items() if k.startswith("experiences_by_group/")}
        assert set(by_explorer) <= {"experiences/a", "experiences/b"}
        assert sum(by_explorer.values()) == per_step
        assert by_group == {f"experiences_by_group/{plan.explorer_group}": float(per_step)}


def test_a_new_group_starts_at_the_moment_tasks_from_names(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = group_config(stack, unique, tmp_path)
    config["mode"] = "explore"
    config["buffer"]["explorer_input"]["taskset"]["generator_args"]["num_tasks"] = 6
    config["explorer"] |= {"name": "late", "experiences_to": "own"}
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(config))
    cfg = load_config(path)
    plan = RunPlan(cfg)
    plan.ensure_topics()
    (taskset,) = [t for t in load_run_tasksets(cfg) if not t.is_eval]
    writer = EventWriter.open(cfg.stack.kafka)
    publisher = TaskPublisher(writer)

    def publish_epoch(epoch: int) -> set[str]:
        rows = len(taskset.rows)
        tasks = [
            publisher.make_task(taskset, epoch, i, position=epoch * rows + i) for i in range(rows)
        ]
        for task in tasks:
            writer.send(plan.topics.tasks, task, key=task.task_id)
        writer.flush()
        return {t.task_id for t in tasks}

    with writer:
        before = publish_epoch(0)
        time.sleep(1.0)
        moment_ms = int(time.time() * 1000)
        time.sleep(1.0)
        after = publish_epoch(1)

    done = subprocess.run(
        rft(
            "explore",
            "--config",
            str(path),
            "--override",
            f"explorer.tasks_from={moment_ms}",
            "--idle-timeout",
            "15",
        ),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RFT_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    explored = committed_experiences(cfg, plan.explorer_experience_topic, f"{unique}-late-check")
    seen = {e.task_id for e in explored}
    assert seen == after and not seen & before  # the tasks published after the moment, all
