"""Step-wise experiences (one per turn): Trinity-RFT's multi_step_grpo advantage, its preset, and
what the trainer hands it (train_batch_of's trajectory numbering through the engine's
fill_advantages). References are float64 python over trajectories, written from the formula."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.objective import Advantages
from rft.algorithms.presets import ALGORITHM_TYPES, resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.buffer.sampler import BatchRow
from rft.consumers.trainer.train_step import train_batch_of
from rft.engines.trainer import fill_advantages
from rft.errors import ConfigError
from rft.events.models import Experience

STEP_WISE = ADVANTAGE_FN.get("step_wise_grpo")

# (group, trajectory, outcome reward, steps): trajectories of unequal length, a lone trajectory
TRAJECTORIES = [
    (0, "a", 1.0, 5),
    (0, "b", 0.0, 1),
    (0, "c", 0.5, 3),
    (1, "d", 2.0, 2),
    (1, "e", -1.0, 4),
    (2, "f", 0.75, 3),
]


def _rows(seed: int) -> list[tuple[int, str, int, float]]:
    """(group, trajectory, turn, reward) per step, shuffled: steps of a trajectory carry its
    reward, the last step the outcome; earlier steps a different number, to show which counts."""
    rows = []
    for group, name, reward, steps in TRAJECTORIES:
        for turn in range(steps):
            rows.append((group, name, turn, reward if turn == steps - 1 else reward + 10.0))
    random.Random(seed).shuffle(rows)
    return rows


def reference(
    rows: list[tuple[int, str, int, float]],
    epsilon: float,
    enable_step_norm: bool,
    std_cal_level: str,
) -> list[float]:
    last: dict[str, tuple[int, float]] = {}
    steps: dict[str, int] = {}
    group_of: dict[str, int] = {}
    for group, name, turn, reward in rows:
        if name not in last or turn > last[name][0]:
            last[name] = (turn, reward)
        steps[name] = steps.get(name, 0) + 1
        group_of[name] = group
    outcome = {name: r for name, (_, r) in last.items()}
    everyone = list(outcome.values())
    batch_std = statistics.stdev(everyone) if len(everyone) > 1 else 1.0
    score = {}
    for name, r in outcome.items():
        members = [outcome[n] for n in outcome if group_of[n] == group_of[name]]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.fmean(members), statistics.stdev(members)
        if std_cal_level == "batch":
            std = batch_std
        a = (r - mean) / (std + epsilon)
        score[name] = a / steps[name] if enable_step_norm else a
    return [score[name] for _, name, _, _ in rows]


def _tensors(rows):
    names = sorted({name for _, name, _, _ in rows})
    return (
        torch.tensor([r for *_, r in rows], dtype=torch.float64),
        torch.tensor([g for g, *_ in rows], dtype=torch.long),
        torch.tensor([names.index(n) * 7 + 3 for _, n, _, _ in rows], dtype=torch.long),
        torch.tensor([t for _, _, t, _ in rows], dtype=torch.long),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("enable_step_norm", [False, True])
@pytest.mark.parametrize("std_cal_level", ["group", "batch"])
def test_step_wise_grpo_matches_the_reference(
    seed: int, enable_step_norm: bool, std_cal_level: str
) -> None:
    rows = _rows(seed)
    rewards, group_index, trajectory_index, turn = _tensors(rows)
    adv, metrics = STEP_WISE(
        rewards,
        group_index,
        trajectory_index,
        turn,
        epsilon=1e-6,
        enable_step_norm=enable_step_norm,
        std_cal_level=std_cal_level,
    )
    expected = torch.tensor(
        reference(rows, 1e-6, enable_step_norm, std_cal_level), dtype=torch.float64
    )
    assert adv.dtype == torch.float64
    torch.testing.assert_close(adv, expected, rtol=1e-12, atol=1e-12)
    assert metrics["trajectory_count"] == len(TRAJECTORIES)
    assert metrics["group_count"] == 3


def test_a_trajectory_weighs_the_same_however_many_steps_it_has() -> None:
    # the same outcomes with every trajectory one step long give the same per-trajectory scores
    rows = _rows(0)
    rewards, group_index, trajectory_index, turn = _tensors(rows)
    adv, _ = STEP_WISE(rewards, group_index, trajectory_index, turn)
    single = [(g, n, 0, r) for g, n, r, _ in TRAJECTORIES]
    r1, g1, t1, u1 = _tensors(single)
    adv1, _ = STEP_WISE(r1, g1, t1, u1)
    by_name = {n: float(a) for (_, n, _, _), a in zip(single, adv1, strict=True)}
    for (_, name, _, _), a in zip(rows, adv, strict=True):
        assert float(a) == pytest.approx(by_name[name], abs=1e-12)


def test_bad_step_inputs_are_refused() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0])
    with pytest.raises(AlgorithmInputError, match="last turn"):
        STEP_WISE(rewards, groups, torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0]))
    with pytest.raises(AlgorithmInputError, match="several groups"):
        STEP_WISE(
            rewards, torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0])
        )
    with pytest.raises(ConfigError, match="std_cal_level"):
        STEP_WISE(rewards, groups, torch.tensor([0, 1, 2]), torch.zeros(3), std_cal_level="task")


def test_multi_step_grpo_preset_and_gigpo_refusal() -> None:
    spec = resolve_algorithm({"algorithm_type": "multi_step_grpo"}, repeat_times=4)
    assert spec.advantage_fn == "step_wise_grpo" and spec.policy_loss_fn == "ppo"
    spec = resolve_algorithm(
        {
            "algorithm_type": "multi_step_grpo",
            "advantage_fn_args": {"enable_step_norm": True, "std_cal_level": "batch"},
        },
        repeat_times=4,
    )
    assert dict(spec.advantage_fn_args) == {"enable_step_norm": True, "std_cal_level": "batch"}
    # the trainer fills these, a config cannot
    with pytest.raises(ConfigError, match="advantage_fn_args.turn"):
        resolve_algorithm(
            {"algorithm_type": "multi_step_grpo", "advantage_fn_args": {"turn": 1}},
            repeat_times=4,
        )
    with pytest.raises(ConfigError, match="anchor states"):
        resolve_algorithm({"algorithm_type": "gigpo"}, repeat_times=4)


def _experiences(seed: int) -> list[Experience]:
    counts = {name: steps for _, name, _, steps in TRAJECTORIES}
    out = []
    for group, name, turn, reward in _rows(seed):
        out.append(
            Experience(
                experience_id=f"{name}/{turn}",
                task_id=f"task{group}",
                group_id=f"task{group}",
                group_size=sum(1 for g, *_ in TRAJECTORIES if g == group),
                explorer_id="e",
                model_version=0,
                prompt_ids=np.array([1, 2], dtype=np.int32),
                response_ids=np.array([3, 4, 5], dtype=np.int32),
                logprobs=np.zeros(3, dtype=np.float32),
                reward=reward,
                trajectory_id=name,
                turn=turn,
                turn_count=counts[name],
            )
        )
    return out


def test_the_trainer_gives_each_step_its_trajectory_advantage() -> None:
    rows = _rows(1)
    batch = train_batch_of([BatchRow(e, None) for e in _experiences(1)])
    spec = ALGORITHM_TYPES.get("multi_step_grpo")
    metrics = fill_advantages(batch, Advantages(spec), lambda b: {})
    assert batch.advantages is not None
    expected = torch.tensor(reference(rows, 1e-6, False, "group"), dtype=torch.float32)
    torch.testing.assert_close(batch.advantages[:, 0], expected, rtol=1e-6, atol=1e-6)
    assert metrics["adv/trajectory_count"] == len(TRAJECTORIES)


def test_a_whole_trajectory_advantage_refuses_step_wise_rows() -> None:
    batch = train_batch_of([BatchRow(e, None) for e in _experiences(0)])
    with pytest.raises(AlgorithmInputError, match="multi_step_grpo"):
        fill_advantages(batch, Advantages(ALGORITHM_TYPES.get("grpo")), lambda b: {})


def test_single_turn_rows_are_unchanged_under_grpo() -> None:
    # old events (no trajectory) are each their own trajectory: grpo runs as before
    exps = [
        Experience(
            experience_id=f"x/{i}",
            task_id="x",
            group_id="x",
            group_size=4,
            explorer_id="e",
            model_version=0,
            prompt_ids=np.array([1], dtype=np.int32),
            response_ids=np.array([2], dtype=np.int32),
            logprobs=np.zeros(1, dtype=np.float32),
            reward=float(i),
        )
        for i in range(4)
    ]
    batch = train_batch_of([BatchRow(e, None) for e in exps])
    assert batch.rewards is not None and batch.rewards.trajectory_index is not None
    assert batch.rewards.trajectory_index.tolist() == [0, 1, 2, 3]
    fill_advantages(batch, Advantages(ALGORITHM_TYPES.get("grpo")), lambda b: {})
    assert batch.advantages is not None
    r = torch.arange(4, dtype=torch.float64)
    expected = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
    torch.testing.assert_close(batch.advantages[:, 0].double(), expected, rtol=1e-6, atol=1e-6)
