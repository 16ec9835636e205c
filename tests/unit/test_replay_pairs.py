"""Preference pairs from rollout groups (rft.consumers.replay.pairs): the best and the worst
response of each complete group, groups without a reward spread skipped, bad experiences named
by where they were read."""

from __future__ import annotations

import numpy as np
import pytest

from rft.consumers.replay.pairs import SIDE_KEY, SOURCE_KEY, PairBuilder
from rft.errors import ReplayError
from rft.events.models import Experience


def rollout(group: str, i: int, reward: float, size: int = 4, **changes) -> Experience:
    fields = {
        "experience_id": f"{group}/{i}",
        "task_id": group,
        "group_id": group,
        "group_size": size,
        "explorer_id": "e0",
        "model_version": 3,
        "prompt_ids": np.array([1, 2, 3], dtype=np.int32),
        "response_ids": np.array([10 + i, 20 + i], dtype=np.int32),
        "logprobs": np.array([-0.5, -0.25], dtype=np.float32),
        "action_mask": np.array([True, True]),
        "reward": reward,
        "info": {"k": "v"},
    }
    return Experience(**(fields | changes))


def feed(builder: PairBuilder, exps: list[Experience]) -> list:
    return [builder.add(e, f"t[0]@{n}") for n, e in enumerate(exps)]


def test_a_complete_group_gives_its_best_and_worst_response() -> None:
    builder = PairBuilder()
    out = feed(builder, [rollout("g", 0, 0.5), rollout("g", 1, 1.0), rollout("g", 2, 0.0)])
    assert out == [None, None, None]  # incomplete: nothing yet
    [chosen, rejected] = builder.add(rollout("g", 3, 1.0), "t[0]@3")
    # the first of the tied best (arrival order) and the worst
    assert (chosen.experience_id, rejected.experience_id) == ("g/1", "g/2")
    assert (chosen.reward, rejected.reward) == (1.0, 0.0)
    assert chosen.group_id == rejected.group_id == "pair:g"
    assert chosen.group_size == rejected.group_size == 2
    assert chosen.info == {"k": "v", SOURCE_KEY: "t[0]@1", SIDE_KEY: "chosen"}
    assert rejected.info[SOURCE_KEY] == "t[0]@2" and rejected.info[SIDE_KEY] == "rejected"
    # the token ids, logprobs and version are the logged ones
    np.testing.assert_array_equal(chosen.response_ids, [11, 21])
    assert chosen.model_version == 3
    assert not builder.pending


def test_a_group_without_a_reward_spread_gives_no_pair() -> None:
    builder = PairBuilder()
    assert feed(builder, [rollout("g", i, 1.0, size=2) for i in range(2)]) == [None, []]


def test_interleaved_groups_are_paired_when_each_completes() -> None:
    builder = PairBuilder()
    exps = [
        rollout("a", 0, 0.0, size=2),
        rollout("b", 0, 1.0, size=2),
        rollout("b", 1, 0.0, size=2),
        rollout("a", 1, 1.0, size=2),
    ]
    out = feed(builder, exps)
    assert out[0] is None and out[1] is None
    assert [e.experience_id for e in out[2]] == ["b/0", "b/1"]
    assert [e.experience_id for e in out[3]] == ["a/1", "a/0"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {
                "response_ids": np.array([], dtype=np.int32),
                "logprobs": np.array([], np.float32),
                "action_mask": np.array([], dtype=bool),
            },
            "t\\[0\\]@1: experience 'g/1' has an empty response",
        ),
        ({"action_mask": np.array([False, False])}, "t\\[0\\]@1: .* no trained token"),
        ({"turn_count": 3, "trajectory_id": "tr"}, "t\\[0\\]@1: .*step 0 of a 3-step"),
    ],
)
def test_bad_experiences_are_named_by_where_they_were_read(bad: dict, message: str) -> None:
    builder = PairBuilder()
    builder.add(rollout("g", 0, 0.0, size=2), "t[0]@0")
    with pytest.raises(ReplayError, match=message):
        builder.add(rollout("g", 1, 1.0, size=2, **bad), "t[0]@1")


def test_a_group_answering_two_prompts_is_refused() -> None:
    builder = PairBuilder()
    builder.add(rollout("g", 0, 0.0, size=2), "t[0]@0")
    other = rollout("g", 1, 1.0, size=2, prompt_ids=np.array([9, 9], dtype=np.int32))
    with pytest.raises(ReplayError, match="t\\[0\\]@1: .*another prompt than t\\[0\\]@0"):
        builder.add(other, "t[0]@1")


def test_a_reward_filter_is_refused_before_anything_is_read() -> None:
    from rft.consumers.replay.filter import ExperienceFilter
    from rft.consumers.replay.pairs import build_pairs
    from rft.errors import ConfigError

    with pytest.raises(ConfigError, match="--min-reward/--max-reward"):
        build_pairs(None, None, "t", ExperienceFilter(min_reward=0.5))  # type: ignore[arg-type]
