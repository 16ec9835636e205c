"""One optimizer step of the configured algorithm on a sampled batch: the app's side of it.

`StepTrainer.train(batch, step)` turns the sampled rows (decoded experiences) into the engine's
TrainBatch, with each row's reward, rollout group and response length, and hands it to the
engine with the algorithm's loss and advantages (`rft.algorithms.objective`). The engine does
the rest: advantages of the learner rows (the KL reference pass first when a reward penalty
needs it), the loss on every micro-batch (demonstration rows get the SFT loss), the update. It
returns the step's metrics, with the learner rewards' mean and std and the step's time.

Beside the step's wall time (`step_time_s`) it reports the CPU seconds spent meanwhile by the
calling thread (`step_thread_cpu_s`) and by the whole process (`step_process_cpu_s`, every
thread: the checkpoint writer's upload included). A step that is slower while the thread's CPU
time stays put waited (for the GPU, or for the interpreter lock another thread held); one whose
thread CPU time grew with it ran on a slower or shared core.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from rft.algorithms.objective import Advantages, AlgorithmLoss
from rft.algorithms.presets import AlgorithmSpec
from rft.buffer.sampler import BatchRow, SampledBatch
from rft.engines.trainer import RowRewards, TrainBatch, TrainerEngine

# A zero-length response (an engine that answered nothing, e.g. an OpenAI-compatible server's empty
# completion) keeps its row: its reward still counts in its group's advantages. The engine needs
# at least one response token per row, so the row gets one placeholder token whose action mask is
# 0: it is run through the model but adds nothing to the loss or the gradient.
_PLACEHOLDER_IDS = np.zeros(1, dtype=np.int32)
_PLACEHOLDER_LOGPROBS = np.zeros(1, dtype=np.float32)
_PLACEHOLDER_MASK = np.zeros(1, dtype=np.int8)


def train_batch_of(rows: Sequence[BatchRow]) -> TrainBatch:
    """The engine's view of the rows (numpy arrays serve as its integer and float sequences).

    Rollout groups are numbered over the learner rows in order of appearance; demonstration
    rows join none (-1) and are marked in `expert` (only when there are some). Trajectories
    (the steps of a step-wise one share theirs) are numbered likewise. A row's response
    length (what length shaping reads) is its count of mask-1 tokens, the tokens the model
    produced: environment and tool tokens inside a multi-turn response are not the model's.
    """
    exps = [r.exp for r in rows]
    lengths = [len(e.response_ids) for e in exps]
    masks = [
        _PLACEHOLDER_MASK
        if not n
        else np.ones(n, dtype=np.int8)
        if e.action_mask is None
        else e.action_mask.astype(np.int8)
        for e, n in zip(exps, lengths, strict=True)
    ]
    groups: dict[str, int] = {}
    group_index = [-1 if r.expert else groups.setdefault(r.exp.group_id, len(groups)) for r in rows]
    # a single-turn experience is its own trajectory (Experience.trajectory's rule, read as
    # fields here: this runs for every row of every step)
    trajectories: dict[tuple[str, str], int] = {}
    trajectory_index = [
        trajectories.setdefault((e.group_id, e.trajectory_id or e.experience_id), len(trajectories))
        for e in exps
    ]
    return TrainBatch(
        prompt_ids=cast(list[Sequence[int]], [e.prompt_ids for e in exps]),
        response_ids=cast(
            list[Sequence[int]],
            [e.response_ids if n else _PLACEHOLDER_IDS for e, n in zip(exps, lengths, strict=True)],
        ),
        old_logprobs=cast(
            list[Sequence[float]],
            [
                e.logprobs if n else _PLACEHOLDER_LOGPROBS
                for e, n in zip(exps, lengths, strict=True)
            ],
        ),
        action_mask=cast(list[Sequence[int]], masks),
        rewards=RowRewards(
            values=torch.tensor([e.reward for e in exps], dtype=torch.float32),
            group_index=torch.tensor(group_index, dtype=torch.long),
            # the placeholder's mask is 0: an empty response has length 0, as it should
            response_lengths=torch.tensor([int(np.sum(m)) for m in masks], dtype=torch.float32),
            trajectory_index=torch.tensor(trajectory_index, dtype=torch.long),
            turn=torch.tensor([e.turn for e in exps], dtype=torch.long),
        ),
        # each row is recomputed at the temperature its logprobs were sampled at
        temperatures=[e.logprob_temperature for e in exps],
        expert=torch.tensor([r.expert for r in rows]) if any(r.expert for r in rows) else None,
        # read by an advantage fn that reads a critic (GAE); an empty response has none
        token_rewards=cast(
            list[Sequence[float] | None],
            [e.token_rewards if n else None for e, n in zip(exps, lengths, strict=True)],
        )
        if any(e.token_rewards is not None for e in exps)
        else None,
    )


class StepTrainer:
    """The algorithm (its loss and advantages) bound to a trainer engine."""

    def __init__(
        self,
        spec: AlgorithmSpec,
        loss: AlgorithmLoss,
        engine: TrainerEngine,
        max_response_length: int | None = None,
    ):
        self.spec = spec
        self.loss = loss
        self.advantages = Advantages(spec, max_response_length)
        self.engine = engine

    def train(self, batch: SampledBatch, step: int) -> dict[str, float]:
        """One GRPO-style step on the batch's rows; the step's metrics."""
        started = time.monotonic()
        thread_cpu, process_cpu = time.thread_time(), time.process_time()
        # the trainer.step span around this call is the trainer loop's (links to the batch)
        values = self.engine.train_step(train_batch_of(batch.rows), self.loss, self.advantages)
        rewards = np.array([r.exp.reward for r in batch.rows if not r.expert], dtype=np.float64)
        if len(rewards):
            values |= {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std())}
        values["step_time_s"] = time.monotonic() - started
        values["step_thread_cpu_s"] = time.thread_time() - thread_cpu
        values["step_process_cpu_s"] = time.process_time() - process_cpu
        return values
