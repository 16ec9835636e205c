"""One optimizer step of the configured algorithm on a sampled batch.

`StepTrainer.train(batch)` turns the batch's rows into the engine's TrainBatch, computes the
advantages of the learner rows (group index per rollout group; an optional KL penalty on rewards
first), gives demonstration rows zero advantage and the SFT loss (`rft.algorithms.expert_rows`),
and runs the engine's step. It returns the step's metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from rft.algorithms.expert_rows import expert_row_loss
from rft.algorithms.objective import AlgorithmLoss, LossBatch, compute_advantages
from rft.algorithms.presets import AlgorithmSpec
from rft.buffer.sampler import BatchRow, SampledBatch
from rft.engines.trainer import TrainBatch, TrainerEngine
from rft.events.models import Experience

log = logging.getLogger(__name__)

EXPERT_MASK = "expert_mask"  # the TrainBatch extra marking demonstration rows


class EngineLoss:
    """Adapts the algorithm's objective to the trainer engine's loss_fn signature; rows marked
    in the `expert_mask` extra get the SFT loss instead."""

    def __init__(self, loss: AlgorithmLoss) -> None:
        self.loss = loss

    def __call__(
        self, logprob: torch.Tensor, entropy: torch.Tensor, t: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        def rl_loss(mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            batch = LossBatch(
                action_mask=mask,
                old_logprob=t["old_logprobs"],
                advantages=t["advantages"],
                ref_logprob=t.get("ref_logprobs"),
            )
            return self.loss(logprob, entropy, batch)

        if EXPERT_MASK in t:
            expert = t[EXPERT_MASK][:, 0] > 0  # per-row flag, broadcast over the row
            loss, metrics = expert_row_loss(
                rl_loss, logprob, t["action_mask"], expert, self.loss.loss_agg_mode
            )
        else:
            loss, metrics = rl_loss(t["action_mask"])
        if "entropy" not in metrics and entropy is not None:
            # reported even when no entropy term is trained on: collapse shows here first
            mask = t["action_mask"]
            metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, metrics


# A zero-length response (an engine that answered nothing, e.g. an OpenAI-compatible server's empty
# completion) keeps its row: its reward still counts in its group's advantages. The engine needs
# at least one response token per row, so the row gets one placeholder token whose action mask is
# 0: it is run through the model but adds nothing to the loss or the gradient.
_PLACEHOLDER_IDS = np.zeros(1, dtype=np.int32)
_PLACEHOLDER_LOGPROBS = np.zeros(1, dtype=np.float32)
_PLACEHOLDER_MASK = np.zeros(1, dtype=np.int8)


def train_batch_of(rows: Sequence[BatchRow]) -> TrainBatch:
    """The engine's view of the rows (numpy arrays serve as its integer and float sequences)."""
    exps = [r.exp for r in rows]
    empty = [e.response_length == 0 for e in exps]
    batch = TrainBatch(
        prompt_ids=cast(list[Sequence[int]], [e.prompt_ids for e in exps]),
        response_ids=cast(
            list[Sequence[int]],
            [_PLACEHOLDER_IDS if z else e.response_ids for e, z in zip(exps, empty, strict=True)],
        ),
        old_logprobs=cast(
            list[Sequence[float]],
            [_PLACEHOLDER_LOGPROBS if z else e.logprobs for e, z in zip(exps, empty, strict=True)],
        ),
        action_mask=cast(
            list[Sequence[int]],
            [_PLACEHOLDER_MASK if z else _action_mask(e) for e, z in zip(exps, empty, strict=True)],
        ),
        advantages=[0.0] * len(exps),
        # each row is recomputed at the temperature its logprobs were sampled at
        temperatures=[e.logprob_temperature for e in exps],
    )
    if any(r.expert for r in rows):
        batch.extras[EXPERT_MASK] = [1.0 if r.expert else 0.0 for r in rows]
    return batch


def _action_mask(e: Experience) -> np.ndarray:
    if e.action_mask is None:
        return np.ones(e.response_length, dtype=np.int8)
    return e.action_mask.astype(np.int8)


def set_advantages(
    spec: AlgorithmSpec,
    batch: TrainBatch,
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    engine: TrainerEngine,
    *,
    max_response_length: int | None = None,
) -> dict[str, float]:
    """Fill `batch.advantages`; with a reward KL penalty (kl_penalty_fn) the rewards first
    lose kl_penalty_coef × the response's KL(rollout policy ‖ reference) estimate. Response
    lengths and `max_response_length` (model.max_response_tokens) serve length shaping (dapo's
    overlong penalty)."""
    lengths = torch.tensor(
        [0 if r is _PLACEHOLDER_IDS else len(r) for r in batch.response_ids], dtype=torch.float32
    )
    if not spec.uses_kl_penalty:
        seq_mask = torch.ones((len(batch), 1), dtype=torch.float32)
        adv, metrics = compute_advantages(
            spec,
            rewards,
            group_index,
            seq_mask,
            response_lengths=lengths,
            max_response_length=max_response_length,
        )
        batch.advantages = [float(a) for a in adv[:, 0]]
        return metrics
    batch.advantages = [0.0] * len(batch)  # not read by reference_logprobs
    padded = engine.reference_logprobs(batch)
    adv, metrics = compute_advantages(
        spec,
        rewards,
        group_index,
        padded["action_mask"],
        logprob=padded["old_logprobs"],
        ref_logprob=padded["ref_logprobs"],
        response_lengths=lengths,
        max_response_length=max_response_length,
    )
    batch.advantages = [
        adv[i, : len(r)].numpy().astype(np.float32) for i, r in enumerate(batch.response_ids)
    ]
    return metrics


class StepTrainer:
    """The algorithm (spec and composed loss) bound to a trainer engine."""

    def __init__(
        self,
        spec: AlgorithmSpec,
        loss: AlgorithmLoss,
        engine: TrainerEngine,
        max_response_length: int | None = None,
    ):
        self.spec = spec
        self.loss = loss
        self.engine = engine
        self.max_response_length = max_response_length

    def train(self, batch: SampledBatch, step: int) -> dict[str, float]:
        """One GRPO-style step: advantages of the learner rows, then the engine's update."""
        started = time.monotonic()
        # the trainer.step span around this call is the trainer loop's (links to the batch)
        learner = [r for r in batch.rows if not r.expert]
        train_batch = train_batch_of(batch.rows)
        values = self._advantages(train_batch, batch.rows, learner)
        values |= self.engine.train_step(train_batch, EngineLoss(self.loss))
        rewards = np.array([r.exp.reward for r in learner], dtype=np.float64)
        if len(rewards):
            values |= {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std())}
        values["step_time_s"] = time.monotonic() - started
        return values

    def _advantages(
        self, train_batch: TrainBatch, rows: list[BatchRow], learner: list[BatchRow]
    ) -> dict[str, float]:
        """Advantages over the learner rows alone (demonstrations keep 0 and join no group)."""
        if not learner:
            return {}
        sub = train_batch if len(learner) == len(rows) else train_batch_of(learner)
        groups: dict[str, int] = {}
        group_index = torch.tensor(
            [groups.setdefault(r.exp.group_id, len(groups)) for r in learner], dtype=torch.long
        )
        rewards = torch.tensor([r.exp.reward for r in learner], dtype=torch.float32)
        metrics = set_advantages(
            self.spec,
            sub,
            rewards,
            group_index,
            self.engine,
            max_response_length=self.max_response_length,
        )
        if sub is not train_batch:
            it = iter(sub.advantages)
            train_batch.advantages = [0.0 if r.expert else next(it) for r in rows]
        return {f"adv/{k}": v for k, v in metrics.items()}
