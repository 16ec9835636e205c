"""Bounded staleness through the real broker: a slow trainer and a fast explorer (tiny model).

The trainer here is as slow as the bound allows: it announces version v only once the explorer
has committed every batch it may make without v (v + η batches: step s needs version s-1-η).
An explorer that keeps the bound is then held at it on every step and the run still finishes;
one that does not would make all its batches on version 0. The checks read only the logs:
the experience topic (each step's batch, its model_version and when it was made) against the
weights topic (when each version was announced). The same run without the bound (its trainer
waits for every batch before announcing anything) is checked too, to show that the checks catch
an explorer that runs ahead.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.run_plan import RunPlan
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.events.models import Experience, Metric, WeightVersion
from rft.events.reader import EventReader
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.integration.test_explorer_sync import Weights
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

STEPS = 6
BATCH = 2  # tasks per explorer step
REPEAT = 2


def run_config(stack: StackSettings, name: str, tmp: Path, eta: int | None) -> dict:
    return {
        "project": "rft-it",
        "name": name,
        "mode": "explore",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": REPEAT},
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 8},
        "buffer": {
            "batch_size": BATCH,
            "total_steps": STEPS,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "math_reward",
                "taskset": {
                    "name": "arith",
                    "storage_type": "generator",
                    "path": "arithmetic",
                    "generator_args": {"digits": 1, "operators": ["+"], "num_tasks": 16},
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
            },
        },
        # one task per engine call: a step has two rollout chunks, so fully_async could load
        # between them
        "explorer": {"eval_on_startup": False, "eval_interval": 100, "runner_per_model": 1},
        "synchronizer": {
            "sync_style": "fully_async",
            "sync_interval": 1,
            "sync_timeout": 60,
            "on_sync_timeout": "stop",
            "max_head_offpolicyness": eta,
        },
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }


def read_all(kafka, topic: str, group: str) -> list:
    """Every envelope of `topic` (tests.topic_log)."""
    return read_topic(kafka, topic, group)


def slow_trainer(kafka, plan: RunPlan, weights: Weights, lead: int, done: threading.Event):
    """Announce version v once v + lead batches of experiences are committed."""
    per_batch = BATCH * REPEAT
    seen = 0
    with EventReader.open(
        kafka, f"{plan.run_id}.slow-trainer", [plan.experience_topic], from_beginning=True
    ) as reader:
        for version in range(1, STEPS):
            while seen < min(version + lead, STEPS) * per_batch and not done.is_set():
                seen += sum(isinstance(e.event, Experience) for e in reader.poll(100, 0.5))
            if done.is_set():
                return
            weights.publish(version)


def explore_against_slow_trainer(
    stack: StackSettings, name: str, tmp: Path, eta: int | None
) -> tuple:
    config_path = tmp / "run.yaml"
    config_path.write_text(yaml.safe_dump(run_config(stack, name, tmp, eta)))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    # the checkpoints perturb the explorer's own base model
    base = create_rollout_engine("hf", RolloutEngineConfig(model=plan.model_spec()))
    weights = Weights(cfg.stack.kafka, plan.topics, plan.checkpoint_store(), tmp, base)
    done = threading.Event()
    # unbounded: the trainer waits for every batch first, so the explorer surely runs ahead
    lead = STEPS if eta is None else eta
    trainer = threading.Thread(
        target=slow_trainer, args=(cfg.stack.kafka, plan, weights, lead, done), daemon=True
    )
    trainer.start()
    try:
        summary = Explorer(cfg, explorer_id="fast", idle_timeout_s=30).run()
    finally:
        done.set()
        trainer.join(timeout=60)
    kafka = cfg.stack.kafka
    experiences = [
        e
        for e in read_all(kafka, plan.experience_topic, name + "-e")
        if isinstance(e.event, Experience)
    ]
    announced = {
        e.event.version: e.event.created_at
        for e in read_all(kafka, plan.topics.weights, name + "-w")
        if isinstance(e.event, WeightVersion)
    }
    metrics = [
        e.event
        for e in read_all(kafka, plan.topics.metrics, name + "-m")
        if isinstance(e.event, Metric) and e.event.component == "explorer"
    ]
    return summary, experiences, announced, metrics


def steps_from_log(experiences: list) -> list[list[Experience]]:
    """The explorer's steps, rebuilt from the log: a step's experiences are made together when
    its rollouts end, after the previous step's commit, so rollout groups sorted by creation
    time and cut every BATCH groups are the steps, in order."""
    groups: dict[str, list[Experience]] = defaultdict(list)
    for env in experiences:
        groups[env.event.group_id].append(env.event)
    ordered = sorted(groups.values(), key=lambda g: min(e.created_at for e in g))
    assert all(len(g) == REPEAT for g in ordered)
    return [[e for g in ordered[i : i + BATCH] for e in g] for i in range(0, len(ordered), BATCH)]


def violations(steps: list[list[Experience]], announced: dict[int, int], eta: int) -> list:
    """Steps that ran more than eta versions ahead: a rollout on weights older than s-1-eta, or
    made before that version was announced on the weights topic."""
    out = []
    for s, batch in enumerate(steps, start=1):
        need = s - 1 - eta
        if need <= 0:
            continue
        oldest = min(e.model_version for e in batch)
        first_made = min(e.created_at for e in batch)
        if oldest < need or need not in announced or first_made < announced[need]:
            out.append((s, need, oldest))
    return out


def test_explorer_never_runs_more_than_eta_versions_ahead(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    eta = 1
    summary, experiences, announced, metrics = explore_against_slow_trainer(
        stack, unique, tmp_path, eta
    )
    assert summary.steps == STEPS
    steps = steps_from_log(experiences)
    assert len(steps) == STEPS
    assert violations(steps, announced, eta) == []
    # the trainer announced v only after v + eta batches, so every later step was held exactly
    # at the bound: it ran on version s-1-eta, no older and (nothing newer existed) no newer
    for s, batch in enumerate(steps, start=1):
        assert {e.model_version for e in batch} == {max(0, s - 1 - eta)}, s
    by_step = {m.step: m.values for m in metrics if "versions_ahead" in m.values}
    assert sorted(by_step) == list(range(1, STEPS + 1))
    assert max(v["versions_ahead"] for v in by_step.values()) == eta
    assert by_step[STEPS]["weight_wait_s_total"] > 0
    assert all(v["sync_timeouts_total"] == 0 for v in by_step.values())


def test_without_the_bound_the_same_checks_catch_the_explorer_running_ahead(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    summary, experiences, announced, _ = explore_against_slow_trainer(stack, unique, tmp_path, None)
    assert summary.steps == STEPS
    assert violations(steps_from_log(experiences), announced, 1), "the unbounded explorer ran ahead"
