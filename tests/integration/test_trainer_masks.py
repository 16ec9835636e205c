"""Holed action masks and step-wise groups through the real stack (Kafka, MinIO, `rft train`).

Experiences are written to the run's experience topic with EventWriter, as an explorer would:
four multi-turn trajectories per task for two tasks, each trajectory one experience per turn
(1 to 3 turns, `multi_step_grpo`), each turn's response with environment tokens between the
model's (action mask 0). They arrive interleaved, so a group is complete only with its last step.
The trainer trains one step on the whole lot; its step metrics count the trained rows, the
mask-1 tokens (the engine sums the masks it was given, so a mask lost on the way from Kafka
to the TrainBatch would count every response token) and the trajectories the advantage saw.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from rft.buffer.expert_source import EXPERT_SOURCES, ExpertContext
from rft.config import RftConfig
from rft.config.connections import StackSettings
from rft.config.schema import AuxiliaryBufferConfig
from rft.consumers.run_plan import RunPlan
from rft.engines.models import build_byte_tokenizer
from rft.events.models import Experience, Metric
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from tests.integration.test_rft_loop import published_run, read_all
from tests.integration.test_trainer_resume import run_verb

pytestmark = pytest.mark.integration


def _experiences(rng: random.Random) -> list[Experience]:
    out = []
    for task in ("t0", "t1"):
        for run in range(4):
            turns = 1 + (run % 3)
            reward = float(run % 2)
            for turn in range(turns):
                n = rng.randint(6, 12)
                mask = np.array([rng.random() < 0.6 for _ in range(n)])
                mask[0] = True  # the model speaks first in every turn
                mask[-1] = False  # and the environment answers inside the response
                out.append(
                    Experience(
                        experience_id=f"{task}/{run}/{turn}",
                        task_id=task,
                        group_id=task,
                        group_size=4,
                        explorer_id="writer",
                        model_version=0,
                        prompt_ids=np.array([rng.randint(3, 200) for _ in range(5)], np.int32),
                        response_ids=np.array([rng.randint(3, 200) for _ in range(n)], np.int32),
                        logprobs=np.where(mask, -1.5, 0.0).astype(np.float32),
                        action_mask=mask,
                        reward=reward,
                        trajectory_id=f"{task}/{run}",
                        turn=turn,
                        turn_count=turns,
                    )
                )
    rng.shuffle(out)
    return out


def train_one_step(
    stack: StackSettings, unique: str, tmp_path: Path, exps: list[Experience], *overrides: str
) -> tuple[RftConfig, RunPlan, dict[str, float]]:
    """`exps` written to a fresh run's experience topic as an explorer would, one `rft train`
    step over all of them (with `overrides`), and that step's metrics."""
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    with EventWriter.open(cfg.stack.kafka) as writer:
        for exp in exps:
            writer.send(plan.experience_topic, exp, key=exp.task_id)
        writer.flush()
    run_verb(
        "train",
        config_path,
        "trainer.total_steps=1",
        f"buffer.train_batch_size={len(exps)}",
        "buffer.trainer_input.experience_buffer.max_read_timeout=60",
        *overrides,
    )
    steps = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-metrics")
        if isinstance(m, Metric) and "sequences" in m.values
    ]
    assert len(steps) == 1, steps
    return cfg, plan, steps[0].values


def test_trainer_trains_holed_masks_of_step_wise_groups(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    exps = _experiences(random.Random(17))
    _, _, values = train_one_step(
        stack,
        unique,
        tmp_path,
        exps,
        "algorithm.algorithm_type=multi_step_grpo",
        "algorithm.kl_loss_fn=none",
    )
    assert values["sequences"] == len(exps)
    mask_ones = sum(int(e.action_mask.sum()) for e in exps)
    assert mask_ones < sum(e.response_length for e in exps)
    assert values["action_tokens"] == mask_ones
    assert values["adv/trajectory_count"] == 8
    assert values["adv/group_count"] == 2


def test_a_multi_turn_demonstration_from_a_topic_keeps_its_mask(
    stack: StackSettings, unique: str
) -> None:
    # demonstrations (sample_strategy mix) read from a topic of experiences: the environment's
    # tokens of a multi-turn one stay mask 0, so the SFT loss skips them
    kafka = dataclasses.replace(stack.kafka, partitions=1)
    topic = f"{unique}.curated"
    ensure_topics(kafka, [topic])
    exp = _experiences(random.Random(3))[0]
    with EventWriter.open(kafka) as writer:
        writer.send(topic, exp, key=exp.task_id)
        writer.flush()
    context = ExpertContext(build_byte_tokenizer(), 64, 8, kafka=kafka, group_prefix=unique)
    buffer = AuxiliaryBufferConfig(path=topic, name="curated", storage_type="kafka")
    source = EXPERT_SOURCES.get(buffer.storage_type)(buffer, context)
    got = None
    for _ in range(30):  # the first polls may come before the group's assignment
        got = source.take(1)
        if got is not None:
            break
    source.close()
    assert got is not None
    (demo,) = got
    assert exp.action_mask is not None and demo.action_mask is not None
    assert demo.action_mask.tolist() == exp.action_mask[:8].tolist()
    assert not demo.action_mask.all()
