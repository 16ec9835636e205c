"""`Trajectory`: what a workflow's rollout of a task hands the explorer; one Experience each.

Token ids are exactly what the model saw and produced: `prompt_ids` is the first prompt, and
`response_ids` everything after it, in order. The model's tokens have action_mask 1 and the
logprobs they were sampled with. In a concatenated multi-turn rollout the environment's and
tools' tokens between the model's turns follow in place with action_mask 0 and logprob 0.0: no
policy sampled them, and the trainer's losses leave them out. A single-turn rollout is one model
turn (`Trajectory.of_reply`); a multi-turn workflow goes on with `then_environment` and
`then_model`, where each model turn must have been generated from `token_ids`, the whole sequence
so far, so the trainer scores the tokens in the context the model had.

This module imports no engine (numpy only): workflows are loaded where torch never is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from rft.events.models import Experience

if TYPE_CHECKING:
    from rft.engines.rollout import Rollout


@dataclass(frozen=True)
class Trajectory:
    """One rollout of a task: its tokens, what the model acted on, and how it scored.

    `finish_reason` is the last model turn's ("stop" | "length" | "timeout"); `info` is the
    reward function's (values of any type; an Experience stores them as text); `metrics` are
    numbers the workflow measured on this rollout (turns, tool calls, ...).
    """

    prompt_ids: npt.NDArray[np.int32]
    response_ids: npt.NDArray[np.int32]
    logprobs: npt.NDArray[np.float32]
    action_mask: npt.NDArray[np.bool_]
    response_text: str
    finish_reason: str
    logprob_temperature: float
    reward: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    # a step of a step-wise rollout (one trajectory per model turn): which rollout of its task,
    # which turn and of how many; a whole trajectory keeps the defaults
    rollout: int | None = None
    turn: int = 0
    turn_count: int = 1

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if len(self.logprobs) != n or len(self.action_mask) != n:
            raise ValueError(
                f"trajectory has {n} response tokens but {len(self.logprobs)} logprobs and "
                f"{len(self.action_mask)} action mask values"
            )

    @classmethod
    def of_reply(
        cls, rollout: Rollout, reward: float = 0.0, info: Mapping[str, Any] | None = None
    ) -> Trajectory:
        """A single-turn trajectory: the prompt and the model's reply to it, with its reward."""
        return cls(
            prompt_ids=np.asarray(rollout.prompt_ids, dtype=np.int32),
            response_ids=np.asarray(rollout.response_ids, dtype=np.int32),
            logprobs=np.asarray(rollout.logprobs, dtype=np.float32),
            action_mask=np.ones(len(rollout.response_ids), dtype=np.bool_),
            response_text=rollout.text,
            finish_reason=rollout.finish_reason,
            logprob_temperature=rollout.logprob_temperature,
            reward=float(reward),
            info=info if info is not None else {},
        )

    @property
    def token_ids(self) -> npt.NDArray[np.int32]:
        """The whole sequence so far: the prompt of the model's next turn."""
        return np.concatenate([self.prompt_ids, self.response_ids])

    @property
    def truncated(self) -> bool:
        """The last model turn hit its token limit."""
        return self.finish_reason == "length"

    @property
    def model_tokens(self) -> int:
        """Tokens the model generated (action_mask 1)."""
        return int(np.count_nonzero(self.action_mask))

    def then_environment(
        self, ids: Sequence[int] | npt.NDArray[np.integer], text: str
    ) -> Trajectory:
        """This trajectory followed by the environment's or a tool's tokens (not trained)."""
        n = len(ids)
        return self._extended(
            np.asarray(ids, dtype=np.int32), np.zeros(n, np.float32), np.zeros(n, np.bool_), text
        )

    def then_model(self, rollout: Rollout) -> Trajectory:
        """This trajectory followed by the model's next turn, sampled from `token_ids`."""
        if not np.array_equal(np.asarray(rollout.prompt_ids), self.token_ids):
            raise ValueError(
                "a model turn must be generated from the trajectory's whole token sequence "
                f"({len(self.token_ids)} tokens); its prompt has {len(rollout.prompt_ids)}"
            )
        if rollout.logprob_temperature != self.logprob_temperature:
            raise ValueError(
                f"a model turn's logprobs are at T={rollout.logprob_temperature:g}, the "
                f"trajectory's at T={self.logprob_temperature:g}: one trajectory has one T"
            )
        turn = self._extended(
            np.asarray(rollout.response_ids, dtype=np.int32),
            np.asarray(rollout.logprobs, dtype=np.float32),
            np.ones(len(rollout.response_ids), np.bool_),
            rollout.text,
        )
        return dataclasses.replace(turn, finish_reason=rollout.finish_reason)

    def as_step(self, rollout: int, turn: int, turn_count: int) -> Trajectory:
        """This trajectory as step `turn` of `turn_count` of its task's rollout `rollout`."""
        if not 0 <= turn < turn_count:
            raise ValueError(f"turn {turn} is not in [0, {turn_count})")
        return dataclasses.replace(self, rollout=rollout, turn=turn, turn_count=turn_count)

    def scored(
        self,
        reward: float,
        info: Mapping[str, Any],
        metrics: Mapping[str, float] | None = None,
    ) -> Trajectory:
        """This trajectory with its reward, its reward fn's info and the workflow's metrics."""
        return dataclasses.replace(
            self, reward=float(reward), info=dict(info), metrics=dict(metrics or self.metrics)
        )

    def _extended(
        self,
        ids: npt.NDArray[np.int32],
        logprobs: npt.NDArray[np.float32],
        mask: npt.NDArray[np.bool_],
        text: str,
    ) -> Trajectory:
        return dataclasses.replace(
            self,
            response_ids=np.concatenate([self.response_ids, ids]),
            logprobs=np.concatenate([self.logprobs, logprobs]),
            action_mask=np.concatenate([self.action_mask, mask]),
            response_text=self.response_text + text,
        )


def step_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """A step's view of its trajectories' own metrics: each key's mean over the trajectories
    (0 where one lacks it), `<key>_mean`, and for counts of tool calls their sum, `<key>_total`.

    A step-wise rollout's steps all carry the rollout's metrics: only its first step (turn 0)
    counts, so each rollout counts once whichever way it was cut."""
    trajectories = [t for t in trajectories if t.turn == 0]
    keys = sorted({k for t in trajectories for k in t.metrics})
    out: dict[str, float] = {}
    for key in keys:
        values = [float(t.metrics.get(key, 0.0)) for t in trajectories]
        out[f"{key}_mean"] = sum(values) / len(values)
        if key.startswith("tool_calls"):
            out[f"{key}_total"] = sum(values)
    return out


def rollouts_in(trajectories: Sequence[Trajectory]) -> int:
    """How many rollouts `trajectories` are: the steps of one step-wise rollout count once."""
    return len({t.rollout if t.rollout is not None else -1 - i for i, t in enumerate(trajectories)})


def experiences_of(
    trajectories: Sequence[Trajectory],
    *,
    id_prefix: str,
    task_id: str,
    group_id: str,
    group_size: int,
    explorer_id: str,
    model_version: int,
    explorer_group: str,
) -> list[Experience]:
    """One Experience per trajectory, all of one rollout group: ids `<id_prefix>:<i>`, and a
    step of a step-wise rollout names its trajectory `<id_prefix>/<rollout>`, its turn and turn
    count. Where the explorer and the serve endpoint both turn trajectories into events."""
    return [
        Experience(
            experience_id=f"{id_prefix}:{i}",
            task_id=task_id,
            group_id=group_id,
            group_size=group_size,
            trajectory_id="" if t.rollout is None else f"{id_prefix}/{t.rollout}",
            turn=t.turn,
            turn_count=t.turn_count,
            explorer_id=explorer_id,
            model_version=model_version,
            prompt_ids=t.prompt_ids,
            response_ids=t.response_ids,
            logprobs=t.logprobs,
            action_mask=t.action_mask,
            reward=t.reward,
            response_text=t.response_text,
            info={k: str(v) for k, v in t.info.items()},
            truncated=t.truncated,
            metrics=dict(t.metrics),
            logprob_temperature=t.logprob_temperature,
            explorer_group=explorer_group,
        )
        for i, t in enumerate(trajectories)
    ]
