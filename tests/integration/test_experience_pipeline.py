"""The experience pipeline through the real stack (Kafka, MinIO, `rft train`).

Three rollout groups of four are written to the run's experience topic as an explorer would: one
whose rewards are all equal, one mixed, one mixed with a NaN reward. The trainer runs one step
with `invalid_reward_filter` then `reward_std_filter`: the NaN row and the equal group are dropped
before the step, and the step's metrics say so per operator; the step trains the other seven; the
version's consumed offsets still cover all twelve (the dropped were consumed) and its trained log
holds exactly the seven it trained.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from rft.config.connections import StackSettings
from rft.events.models import Experience, WeightVersion
from rft.events.reader import EventReader
from tests.integration.test_rft_loop import read_all
from tests.integration.test_trainer_masks import train_one_step

pytestmark = pytest.mark.integration

REWARDS = {
    "same": [1.0, 1.0, 1.0, 1.0],
    "mixed": [0.0, 1.0, 0.0, 1.0],
    "nan": [math.nan, 1.0, 0.0, 1.0],
}


def _experiences() -> list[Experience]:
    return [
        Experience(
            experience_id=f"{group}/{i}",
            task_id=group,
            group_id=group,
            group_size=4,
            explorer_id="writer",
            model_version=0,
            prompt_ids=np.array([5, 6, 7], np.int32),
            response_ids=np.array([8 + i, 9, 10, 11], np.int32),
            logprobs=np.full(4, -1.5, np.float32),
            reward=reward,
        )
        for group, rewards in REWARDS.items()
        for i, reward in enumerate(rewards)
    ]


def test_the_pipeline_drops_before_the_step_and_says_so(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    exps = _experiences()
    cfg, plan, values = train_one_step(
        stack,
        unique,
        tmp_path,
        exps,
        "data_processor.experience_pipeline.operators="
        "[{name: invalid_reward_filter}, {name: reward_std_filter, args: {threshold: 0.0}}]",
    )
    assert values["pipeline/invalid_reward_filter/dropped"] == 1
    assert values["pipeline/reward_std_filter/dropped"] == 4
    assert values["pipeline/reward_std_filter/dropped_groups"] == 1
    assert values["pipeline/dropped"] == 5
    assert values["sequences"] == len(exps) - 5

    where: dict[tuple[int, int], str] = {}  # (partition, offset) -> experience id
    with EventReader.open(
        cfg.stack.kafka, unique + "-exps", [plan.experience_topic], from_beginning=True
    ) as reader:
        while len(where) < len(exps):
            for env in reader.poll(100, timeout_s=1.0):
                where[(env.partition, env.offset)] = env.event.experience_id
    (version,) = [
        e for e in read_all(cfg, plan.topics.weights, unique + "-w") if isinstance(e, WeightVersion)
    ]
    consumed = {(o.partition, o.offset) for o in version.consumed_offsets}
    assert all(
        any(p == part and off < next_offset for part, next_offset in consumed) for p, off in where
    ), (consumed, sorted(where))
    assert version.trained_log is not None
    trained = {
        where[(r.partition, off)]
        for r in version.trained_log.trained
        for first, last in r.ranges
        for off in range(first, last + 1)
    }
    assert trained == {"mixed/0", "mixed/1", "mixed/2", "mixed/3", "nan/1", "nan/2", "nan/3"}
