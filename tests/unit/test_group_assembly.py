"""GroupAssembler: a group is complete when every step of every one of its trajectories is in."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

from rft.buffer.group_assembly import GroupAssembler
from rft.buffer.group_sampler import uniform_rewards
from rft.buffer.sampler import Admitted
from rft.events.models import Experience


def _admitted(
    name: str, group: str, size: int, offset: int, trajectory: str = "", turn: int = 0, of: int = 1
) -> Admitted:
    exp = Experience(
        experience_id=name,
        task_id=group,
        group_id=group,
        group_size=size,
        explorer_id="e",
        model_version=0,
        prompt_ids=np.array([1], dtype=np.int32),
        response_ids=np.array([2], dtype=np.int32),
        logprobs=np.zeros(1, dtype=np.float32),
        trajectory_id=trajectory,
        turn=turn,
        turn_count=of,
    )
    return Admitted(exp, ("experiences", 0), offset)


def _step_wise_group(group: str, lengths: list[int]) -> list[Admitted]:
    items = []
    offsets = itertools.count()
    for t, length in enumerate(lengths):
        for turn in range(length):
            items.append(
                _admitted(
                    f"{group}/{t}/{turn}",
                    group,
                    len(lengths),
                    next(offsets),
                    f"{group}/{t}",
                    turn,
                    length,
                )
            )
    return items


@pytest.mark.parametrize("seed", range(5))
def test_a_step_wise_group_completes_with_its_last_step(seed: int) -> None:
    a = _step_wise_group("a", [3, 1, 4])
    b = _step_wise_group("b", [2, 2])
    arrivals = a + b
    random.Random(seed).shuffle(arrivals)
    assembler = GroupAssembler()
    done: dict[str, list[Admitted]] = {}
    for i, item in enumerate(arrivals):
        group = assembler.add(item)
        if group is None:
            continue
        gid = item.group_id
        done[gid] = group
        members = a if gid == "a" else b
        # complete exactly when the last of its members arrived, and in arrival order
        assert {m.key for m in group} == {m.key for m in members}
        assert i == max(arrivals.index(m) for m in members)
        assert group == [x for x in arrivals if x.group_id == gid]
    assert set(done) == {"a", "b"}
    assert assembler.pending_count == 0


def test_a_missing_step_keeps_the_group_pending() -> None:
    items = _step_wise_group("a", [3, 2])
    assembler = GroupAssembler()
    # all trajectories started, one step of the 3-step one never arrives
    for item in items[:2] + items[3:]:
        assert assembler.add(item) is None
    assert assembler.pending_count == 4
    assert assembler.add(items[2]) is not None


def test_whole_trajectory_experiences_complete_at_group_size() -> None:
    # events before v4 (no trajectory): each experience is a trajectory of one step
    assembler = GroupAssembler()
    items = [_admitted(f"x/{i}", "x", 4, i) for i in range(4)]
    assert [assembler.add(i) for i in items[:3]] == [None, None, None]
    assert assembler.add(items[3]) == items


def _with_reward(item: Admitted, reward: float) -> Admitted:
    return Admitted(dataclasses.replace(item.exp, reward=reward), item.tp, item.offset)


def test_the_group_filter_compares_trajectory_outcomes() -> None:
    items = _step_wise_group("a", [3, 2])
    # outcomes (last steps) equal, earlier steps' rewards differ: nothing to learn, filtered
    same = [
        _with_reward(m, 1.0 if m.exp.turn == m.exp.turn_count - 1 else 0.1 * i)
        for i, m in enumerate(items)
    ]
    assert uniform_rewards(same)
    # outcomes differ, earlier steps all equal: the group teaches, kept
    differ = [
        _with_reward(m, float(i) if m.exp.turn == m.exp.turn_count - 1 else 0.0)
        for i, m in enumerate(items)
    ]
    assert not uniform_rewards(differ)
    # whole-trajectory experiences: the rewards themselves
    flat = [_admitted(f"x/{i}", "x", 3, i) for i in range(3)]
    assert uniform_rewards([_with_reward(m, 0.5) for m in flat])
    assert not uniform_rewards([_with_reward(m, float(i)) for i, m in enumerate(flat)])
