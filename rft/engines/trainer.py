"""Trainer engines: the `TrainerEngine` protocol, the `TRAINER_ENGINES` registry and the `torch`
engine (optimizer steps on a transformers model in one process).

`TrainerEngine` is what the trainer loop (`rft.consumers.trainer.trainer`) and the checkpointer
(`rft.consumers.trainer.checkpoint`) use, whatever the engine: one optimizer step per batch, the
reference model's logprobs, weights out (HF directory / safetensors, in the rollout dtype) and in,
and the training state. `TRAINER_ENGINES` builds one from a loaded model, its tokenizer, a
`TorchTrainerConfig` and a `TrainerPlacement` (how many ranks, on which devices); the config's
`trainer.trainer_type` / `trainer_strategy` pick the entry (`TrainerConfig.engine_name`).

`TorchTrainerEngine.train_step(batch, loss_fn, advantages)` is the whole step: the batch's
advantages from its rewards (`fill_advantages`: the algorithm's `Advantages`, after the reference
pass when a reward KL penalty needs one), then for each micro-batch the padded tensors, the
policy's (and the reference's) logprobs and entropy over the response positions (each row at the
temperature its old logprobs were recorded at), the `LossBatch` and the algorithm's loss called
on it (`rft.algorithms.objective.LossFn`), gradients accumulated, clipped, and AdamW plus the LR
schedule stepped. With a critic attached (`attach_critic`, PPO), the advantage fn that reads it
gets the critic's values of the batch first (`critic_values`), and the critic takes its own
update on the clipped value loss after the policy's (`rft.engines.critic`). The FSDP2 engine
(`rft.engines.fsdp_engine`) reuses these pieces on each rank; it carries no critic.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from rft.algorithms.expert_rows import BatchUnits
from rft.algorithms.objective import Advantages, LossBatch, LossFn, at_last_token
from rft.algorithms.value_loss import clipped_value_loss, explained_variance
from rft.engines.activation_checkpointing import checkpoint_decoder_layers
from rft.engines.critic import Critic
from rft.engines.logprobs import token_logprobs
from rft.engines.lora import LoraSpec
from rft.engines.micro_batches import micro_batches
from rft.engines.state_snapshot import (
    cpu_snapshot,
    host_tensors,
    reserve_pinned,
    version_copy_sizes,
)
from rft.engines.weights import (
    export_state_dict,
    export_state_dict_names,
    load_weights_into,
    read_safetensors_dir,
)
from rft.errors import ConfigError, EngineError
from rft.registry import PartSpec, Registry


@dataclass(frozen=True)
class TorchTrainerConfig:
    """Optimizer, schedule and batching of the torch trainer engine.

    lr schedule: linear warmup over `warmup_steps` (factor (s+1)/warmup), then "constant", or
    "cosine" / "linear" decay to `min_lr_ratio * lr` at `total_steps` (LR_SCHEDULES).
    accumulation: how micro-batch losses combine into the batch loss. "token": each micro loss is
    weighted by its share of the batch's action tokens (exact for token-mean losses); "sequence":
    by its share of sequences (exact for per-sequence-mean losses).
    There is no temperature here: it belongs to each sequence (`TrainBatch.temperatures`), since
    one batch may mix tasksets sampled at different temperatures.
    """

    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    warmup_steps: int = 0
    total_steps: int = 0
    lr_schedule: str = "constant"
    min_lr_ratio: float = 0.0
    grad_clip: float = 1.0
    micro_batch_size: int = 8
    use_ref_model: bool = False
    ref_in_loss: bool = True  # False: the reference serves only reference_logprobs (KL penalty)
    accumulation: str = "token"
    logprob_chunk_tokens: int = 1024
    autocast_dtype: str | None = None  # "bfloat16": forward in bf16, weights and AdamW in fp32
    lora: LoraSpec | None = None  # train this adapter instead of the model (model.lora_configs)
    # memory (trainer.*): micro-batches by padded token count instead of micro_batch_size rows,
    # decoder layers' activations recomputed in backward, AdamW's state off the device between
    # steps, and (fsdp2 only) parameters, gradients and the optimizer step on the CPU
    max_tokens_per_micro_batch: int | None = None
    gradient_checkpointing: bool = False
    optimizer_offload: bool = False
    param_offload: bool = False

    def __post_init__(self) -> None:
        if self.micro_batch_size < 1:
            raise ConfigError(f"trainer.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.accumulation not in ("token", "sequence"):
            raise ConfigError(
                f"trainer.accumulation must be 'token' or 'sequence', got {self.accumulation!r}"
            )
        LR_SCHEDULES.get(self.lr_schedule)
        if self.max_tokens_per_micro_batch is not None and self.max_tokens_per_micro_batch < 2:
            raise ConfigError(
                "trainer.max_token_len_per_gpu must be >= 2 (a prompt token and a response "
                f"token), got {self.max_tokens_per_micro_batch}"
            )
        if self.autocast_dtype not in (None, "bfloat16"):
            raise ConfigError(
                f"trainer autocast dtype must be bfloat16 or unset, got {self.autocast_dtype!r} "
                "(float16 would need loss scaling)"
            )


LrSchedule = Callable[[int, TorchTrainerConfig], float]
LR_SCHEDULES: Registry[LrSchedule] = Registry("trainer.lr_schedule")


def _warmup(step: int, config: TorchTrainerConfig) -> float | None:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    return None


def _decay_progress(step: int, config: TorchTrainerConfig) -> float:
    """Progress p in [0, 1] from the end of warmup to total_steps."""
    span = max(1, config.total_steps - config.warmup_steps)
    return min(1.0, (step - config.warmup_steps) / span)


@LR_SCHEDULES.register("constant")
def constant_schedule(step: int, config: TorchTrainerConfig) -> float:
    """factor = 1 after warmup."""
    warm = _warmup(step, config)
    return 1.0 if warm is None else warm


@LR_SCHEDULES.register("cosine")
def cosine_schedule(step: int, config: TorchTrainerConfig) -> float:
    """factor = m + (1 - m) * (1 + cos(pi * p)) / 2, p = progress after warmup in [0, 1]."""
    warm = _warmup(step, config)
    if warm is not None:
        return warm
    m = config.min_lr_ratio
    return m + (1.0 - m) * 0.5 * (1.0 + math.cos(math.pi * _decay_progress(step, config)))


@LR_SCHEDULES.register("linear")
def linear_schedule(step: int, config: TorchTrainerConfig) -> float:
    """factor = m + (1 - m) * (1 - p), p = progress after warmup in [0, 1]: a straight line from
    lr to min_lr_ratio * lr at total_steps."""
    warm = _warmup(step, config)
    if warm is not None:
        return warm
    m = config.min_lr_ratio
    return m + (1.0 - m) * (1.0 - _decay_progress(step, config))


@dataclass
class RowRewards:
    """What a step's advantages are computed from, one entry per row of its TrainBatch.

    values: [B] rewards. group_index: [B] long, shared by the rows of one rollout group
    (demonstration rows join no group: their entry is ignored). response_lengths: [B] response
    tokens of each row that the model produced (its mask-1 tokens; 0 for an empty response, which
    the batch runs as one placeholder token). trajectory_index / turn: [B] long, the trajectory
    each row is a step of (shared by the steps of one trajectory) and its turn in it; None: every
    row is a whole trajectory.
    """

    values: torch.Tensor
    group_index: torch.Tensor
    response_lengths: torch.Tensor
    trajectory_index: torch.Tensor | None = None
    turn: torch.Tensor | None = None


@dataclass
class CriticTargets:
    """What the critic's update of one step regresses on: for the batch's rows `rows` (the
    learner rows, in order), the values it predicted before the step and the returns, [n, W]
    (W the batch's longest response; columns past a row's response are 0)."""

    rows: list[int]
    old_values: torch.Tensor
    returns: torch.Tensor


@dataclass
class TrainBatch:
    """One optimizer step's sequences: token columns as python lists / numpy arrays (one entry
    per sequence), per-row numbers as tensors.

    advantages: [B] (one per sequence, spread over its response) or [B, W] (one per token, W at
    least the longest response; columns past a row's response are ignored). None: zeros, or the
    engine computes them from `rewards` when train_step is given the algorithm's `Advantages`.
    temperatures: the T each row's old_logprobs were recorded at (log_softmax(logits / T)); the
    engine recomputes that row's logprobs, entropy and reference logprobs at the same T, so the
    ratio exp(logprob - old_logprob) is 1 on-policy. None: every row at T = 1.0.
    expert: [B] bool, True on demonstration rows (zero advantage, the SFT loss). None: none.
    token_rewards: per row, its reward of each response token, or None where the row has only
    its sequence reward (`rewards.values`); read by an advantage fn that reads a critic's values.
    critic_targets: set by `fill_advantages` for such an advantage fn: what the critic's update
    regresses on.
    """

    prompt_ids: list[Sequence[int]]
    response_ids: list[Sequence[int]]
    old_logprobs: list[Sequence[float]]
    action_mask: list[Sequence[int]]
    advantages: torch.Tensor | None = None
    rewards: RowRewards | None = None
    temperatures: list[float] | None = None
    expert: torch.Tensor | None = None
    token_rewards: list[Sequence[float] | None] | None = None
    critic_targets: CriticTargets | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """The sub-batch of `rows` (in that order), every column cut alike."""
        rows = list(rows)
        index = torch.tensor(rows, dtype=torch.long)

        def cut(column: list[Any]) -> list[Any]:
            return [column[i] for i in rows]

        rewards = self.rewards
        return TrainBatch(
            prompt_ids=cut(self.prompt_ids),
            response_ids=cut(self.response_ids),
            old_logprobs=cut(self.old_logprobs),
            action_mask=cut(self.action_mask),
            advantages=None if self.advantages is None else self.advantages[index],
            rewards=None
            if rewards is None
            else RowRewards(
                rewards.values[index],
                rewards.group_index[index],
                rewards.response_lengths[index],
                None if rewards.trajectory_index is None else rewards.trajectory_index[index],
                None if rewards.turn is None else rewards.turn[index],
            ),
            temperatures=None if self.temperatures is None else cut(self.temperatures),
            expert=None if self.expert is None else self.expert[index],
            token_rewards=None if self.token_rewards is None else cut(self.token_rewards),
        )

    def validate(self) -> None:
        n = len(self.prompt_ids)
        columns: dict[str, Any] = {
            "response_ids": self.response_ids,
            "old_logprobs": self.old_logprobs,
            "action_mask": self.action_mask,
            **({"advantages": self.advantages} if self.advantages is not None else {}),
            **({"temperatures": self.temperatures} if self.temperatures is not None else {}),
            **({"expert": self.expert} if self.expert is not None else {}),
            **({"token_rewards": self.token_rewards} if self.token_rewards is not None else {}),
            **(
                {
                    "rewards.values": self.rewards.values,
                    "rewards.group_index": self.rewards.group_index,
                    "rewards.response_lengths": self.rewards.response_lengths,
                    **{
                        f"rewards.{name}": column
                        for name in ("trajectory_index", "turn")
                        if (column := getattr(self.rewards, name)) is not None
                    },
                }
                if self.rewards is not None
                else {}
            ),
        }
        for name, column in columns.items():
            if len(column) != n:
                raise EngineError(f"TrainBatch.{name} has {len(column)} rows, prompt_ids has {n}")
        if self.advantages is not None and self.advantages.dim() not in (1, 2):
            raise EngineError(
                f"TrainBatch.advantages must be [B] or [B, W], got {tuple(self.advantages.shape)}"
            )
        for i, t in enumerate(self.temperatures or ()):
            if not (isinstance(t, numbers.Real) and math.isfinite(t) and t > 0):
                raise EngineError(
                    f"TrainBatch row {i}: temperature must be finite and > 0, got {t!r}"
                )
        width = (
            1 if self.advantages is None or self.advantages.dim() == 1 else self.advantages.shape[1]
        )
        for i in range(n):
            r = len(self.response_ids[i])
            if r == 0 or len(self.prompt_ids[i]) == 0:
                raise EngineError(f"TrainBatch row {i}: empty prompt or response")
            names = ["old_logprobs", "action_mask"]
            if self.token_rewards is not None and self.token_rewards[i] is not None:
                names.append("token_rewards")
            for name in names:
                if len(columns[name][i]) != r:
                    raise EngineError(
                        f"TrainBatch row {i}: {name} has {len(columns[name][i])} entries, "
                        f"response has {r} tokens"
                    )
            if width != 1 and width < r:
                raise EngineError(
                    f"TrainBatch row {i}: advantages has {width} columns, response has {r} tokens"
                )


def fill_advantages(
    batch: TrainBatch,
    advantages: Advantages,
    reference: Callable[[TrainBatch], dict[str, torch.Tensor]],
    values: Callable[[TrainBatch], dict[str, torch.Tensor]] | None = None,
) -> dict[str, float]:
    """Set `batch.advantages` from `batch.rewards`, the learner rows' by `advantages` (over the
    learner rows alone: demonstrations keep 0 and join no group); metrics named adv/<name>.

    Without a reward KL penalty they are one per sequence ([B, 1]); with one, the learner rows'
    reference logprobs come first (`reference`, the engine's reference_logprobs) and the
    advantages are per token ([B, R], the action mask applied). An advantage fn that reads a
    critic (`advantages.needs_values`) gets the learner rows' values from `values` (the
    engine's critic_values) and their token rewards, and `batch.critic_targets` is set.
    A teacher advantage fn
    (`advantages.needs_teacher`) gets the reference pass as the teacher's logprobs: the engine's
    reference model is then the teacher (`TorchTrainerEngine.set_reference_model`).
    """
    rewards = batch.rewards
    if rewards is None:
        raise EngineError("train_step with the algorithm's advantages needs TrainBatch.rewards")
    expert = batch.expert
    learner = [i for i in range(len(batch)) if expert is None or not bool(expert[i])]
    batch.advantages = torch.zeros((len(batch), 1), dtype=torch.float32)
    batch.critic_targets = None
    if not learner:
        return {}
    sub = batch if len(learner) == len(batch) else batch.select(learner)
    assert sub.rewards is not None
    if advantages.needs_values:
        return _fill_from_values(batch, sub, learner, advantages, reference, values)
    if advantages.needs_reference or advantages.needs_teacher:
        # a teacher algorithm's reference model is its teacher (the trainer loads it there)
        padded = reference(sub)
        adv, metrics = advantages(
            sub.rewards.values,
            sub.rewards.group_index,
            padded["action_mask"],
            padded["old_logprobs"],
            None if advantages.needs_teacher else padded["ref_logprobs"],
            response_lengths=sub.rewards.response_lengths,
            trajectory_index=sub.rewards.trajectory_index,
            turn=sub.rewards.turn,
            teacher_logprob=padded["ref_logprobs"] if advantages.needs_teacher else None,
        )
    else:
        adv, metrics = advantages(
            sub.rewards.values,
            sub.rewards.group_index,
            torch.ones((len(sub), 1), dtype=torch.float32),
            response_lengths=sub.rewards.response_lengths,
            trajectory_index=sub.rewards.trajectory_index,
            turn=sub.rewards.turn,
        )
    cols = adv.shape[1]
    # token advantages span the batch's widest response, a demonstration's too (the loss's
    # logprobs do); the learner rows' own padding may be narrower
    width = cols if cols == 1 else max(cols, max(len(r) for r in batch.response_ids))
    full = torch.zeros((len(batch), width), dtype=adv.dtype)
    full[torch.tensor(learner, dtype=torch.long), :cols] = adv.detach().cpu()
    batch.advantages = full
    return {f"adv/{k}": v for k, v in metrics.items()}


def _fill_from_values(
    batch: TrainBatch,
    sub: TrainBatch,
    learner: list[int],
    advantages: Advantages,
    reference: Callable[[TrainBatch], dict[str, torch.Tensor]],
    values: Callable[[TrainBatch], dict[str, torch.Tensor]] | None,
) -> dict[str, float]:
    """`fill_advantages` for an advantage fn that reads a critic: GAE and the critic's targets.

    A row's token rewards are its `token_rewards` when it has them, else its sequence reward
    on its last mask-1 token (an outcome reward, as verl places it)."""
    if values is None:
        raise EngineError(
            f"advantage_fn {advantages.spec.advantage_fn!r} reads a critic's values, and this "
            "trainer engine has no critic"
        )
    assert sub.rewards is not None
    padded = values(sub)
    mask, old_values = padded["action_mask"], padded["values"]
    width = max(len(r) for r in batch.response_ids)
    token_rewards = torch.zeros_like(old_values)
    outcome = sub.rewards.values.to(old_values.dtype).clone()
    for row, given in enumerate(sub.token_rewards or [None] * len(sub)):
        if given is not None:
            r = np.asarray(given, dtype=np.float64)
            token_rewards[row, : len(r)] = torch.from_numpy(r).to(old_values.dtype)
            outcome[row] = 0.0
    token_rewards = token_rewards * mask
    ref: dict[str, torch.Tensor] = {}
    if advantages.needs_reference:
        ref = reference(sub)
    targets, metrics = advantages.targets(
        sub.rewards.values.to(old_values.dtype),
        token_rewards + at_last_token(outcome, mask),
        old_values,
        mask,
        ref.get("old_logprobs"),
        ref.get("ref_logprobs"),
        response_lengths=sub.rewards.response_lengths,
    )
    index = torch.tensor(learner, dtype=torch.long)
    cols = targets.advantages.shape[1]
    full = torch.zeros((len(batch), width), dtype=targets.advantages.dtype)
    full[index, :cols] = targets.advantages.detach().cpu()
    batch.advantages = full

    def widened(t: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((len(learner), width), dtype=t.dtype)
        out[:, : t.shape[1]] = t.detach().cpu()
        return out

    batch.critic_targets = CriticTargets(learner, widened(old_values), widened(targets.returns))
    out = {f"adv/{k}": v for k, v in metrics.items()}
    out["critic/explained_variance"] = explained_variance(old_values, targets.returns, mask)
    return out


def rows_per_unit(loss_fn: Any) -> int:
    """Rows of a batch that `loss_fn` needs together in one micro-batch (and on one rank): its
    `rows_per_unit` (2 for a loss over adjacent pairs), else 1."""
    return int(getattr(loss_fn, "rows_per_unit", 1))


def accumulation_of(loss_fn: Any, config: TorchTrainerConfig) -> str:
    """How `loss_fn`'s micro-batch losses combine: as the loss says (`accumulation`: "sequence"
    for a mean over sequences or pairs, which token shares would bias), else the config's."""
    return getattr(loss_fn, "accumulation", None) or config.accumulation


def split_micro_batches(
    batch: TrainBatch, config: TorchTrainerConfig, unit: int = 1
) -> list[list[int]]:
    """Row indices of each micro-batch of `batch` (rft.engines.micro_batches): by
    `micro_batch_size` rows, or by `max_tokens_per_micro_batch` padded tokens when set, never
    cutting a unit of `unit` rows (a loss's `rows_per_unit`: a pair for dpo)."""
    return micro_batches(
        [len(p) for p in batch.prompt_ids],
        [len(r) for r in batch.response_ids],
        config.micro_batch_size,
        config.max_tokens_per_micro_batch,
        unit,
    )


class TrainerEngine(Protocol):
    """What the trainer loop and the checkpointer use of an engine (every engine provides it).

    Calls are made by one process (rank 0 of a sharded engine, which has the other ranks do their
    part). `dtype` is the dtype of the trained (master) weights; `step` counts optimizer steps.
    """

    step: int

    @property
    def dtype(self) -> torch.dtype: ...

    def train_step(
        self, batch: TrainBatch, loss_fn: LossFn, advantages: Advantages | None = None
    ) -> dict[str, float]:
        """One optimizer step over the whole batch: loss, grad_norm, lr, skipped, the loss's
        metrics (averaged over micro-batches with the loss's weights), sequences, action_tokens.
        With `advantages`, the batch's advantages are computed first from its rewards
        (`fill_advantages`, the reference pass included), and their metrics join."""
        ...

    def reference_logprobs(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        """[B, R] CPU tensors `ref_logprobs`, `old_logprobs`, `action_mask` (zero-padded)."""
        ...

    def save_hf(
        self, directory: str | Path, dtype: torch.dtype | None = None, *, weights: bool = True
    ) -> Path:
        """An HF directory (config, safetensors in `dtype`, tokenizer) of the current weights;
        without `weights`, the directory's other files only (the weights travel as tensors)."""
        ...

    def export_weights(
        self, dtype: torch.dtype | None = None, *, owned: bool = False
    ) -> dict[str, torch.Tensor]:
        """The current weights to publish: HF names (each storage once), on CPU, in `dtype`.
        They may share the model's memory (read them before the next step) unless `owned`:
        then they are a copy of their own that later steps do not change, which the checkpoint
        writer uploads while the trainer goes on (a transfer from a GPU is that copy already)."""
        ...

    def save_weights(self, file: str | Path, dtype: torch.dtype | None = None) -> None:
        """The current weights (HF names, each storage once) as one safetensors file."""
        ...

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Replace the trained weights with `tensors` (HF names); the optimizer is untouched."""
        ...

    def version_extra(self) -> dict[str, str]:
        """What a version's manifest must say about the form of its weights (a LoRA adapter
        and its base: rft.engines.lora), empty for full weights. A version is loaded back only
        into an engine that says the same."""
        ...

    def training_state(self) -> dict[str, Any]:
        """The training state (AdamW moments, LR schedule, step) now, as a CPU copy that the
        next step does not change (rft.engines.state_snapshot): the checkpoint writer takes it
        on the step's path and serializes it in the background."""
        ...

    def reserve_version_copies(
        self, export_dtype: torch.dtype | None, with_master: bool
    ) -> threading.Thread | None:
        """Start setting aside, in the background, the host memory a version's copies will take:
        `export_weights(export_dtype, owned=True)`, `training_state()` and, `with_master`,
        `export_weights(owned=True)` in the engine's own dtype. The first version (and the first
        carrying the training state) then does not allocate it on the step's path. Returns at
        once: the thread doing it, or None for an engine whose copies need no allocation of
        their own."""
        ...

    def restore_training_state(self, state: dict[str, Any], source: str) -> None:
        """Continue from `state`, what `training_state()` returned (CPU tensors); EngineError
        naming `source` (where it was read) when it does not fit."""
        ...

    def skip_to_step(self, step: int) -> None:
        """Continue the LR schedule at `step` with fresh optimizer moments."""
        ...

    def close(self) -> None:
        """Release what the engine holds beyond this process (other ranks); idempotent."""
        ...


@dataclass(frozen=True)
class TrainerPlacement:
    """Where an engine's ranks compute: one device per rank, rank 0 first (this process)."""

    devices: tuple[str, ...] = ("cpu",)

    @property
    def world_size(self) -> int:
        return len(self.devices)


class TorchTrainerEngine:
    """AdamW on a transformers causal LM with gradient accumulation over micro-batches.

    The forward runs in eval mode (no dropout) so the trainer's logprobs use the same function as
    the rollout engine's; gradients flow as usual.
    """

    def __init__(
        self,
        model: Any,
        config: TorchTrainerConfig,
        *,
        tokenizer: Any = None,
        ref_model: Any = None,
        critic: Critic | None = None,
    ) -> None:
        self.model = model
        self.critic = critic
        self.config = config
        self.tokenizer = tokenizer
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = 0 if pad is None else int(pad)
        self.step = 0
        self.model.eval()
        if ref_model is None and config.use_ref_model:
            ref_model = copy.deepcopy(model)
        if ref_model is not None:
            ref_model.eval()
            ref_model.requires_grad_(False)
        self.ref_model = ref_model
        if config.gradient_checkpointing:
            checkpoint_decoder_layers(model)
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise EngineError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            self._params,
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
            weight_decay=config.weight_decay,
        )
        schedule = LR_SCHEDULES.get(config.lr_schedule)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: schedule(s, config)
        )

    def attach_critic(self, critic: Critic) -> None:
        """Train `critic` (its value model on this engine's device) beside the policy: its values
        feed an advantage fn that reads them, and it takes one update per train_step."""
        self.critic = critic

    @property
    def device(self) -> torch.device:
        return self._params[0].device

    @property
    def dtype(self) -> torch.dtype:
        return self._params[0].dtype

    def train_step(
        self, batch: TrainBatch, loss_fn: LossFn, advantages: Advantages | None = None
    ) -> dict[str, float]:
        """One optimizer step over `batch`; returns loss, grad_norm, lr and the loss's metrics
        (on a GPU also `gpu_peak_gib`, the step's peak of memory torch allocated there).

        With `advantages` (the algorithm's), the advantages come first from the batch's rewards
        (`fill_advantages`: the reference pass, when a reward KL penalty needs it, runs here).
        Metrics of loss_fn are averaged over micro-batches with the same weights as the loss.
        A non-finite gradient norm skips the update (metric skipped=1) instead of corrupting the
        weights.
        """
        batch.validate()
        if len(batch) == 0:
            raise EngineError("train_step needs at least one sequence")
        on_gpu = self.device.type == "cuda"
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
        values = (
            {}
            if advantages is None
            else fill_advantages(
                batch,
                advantages,
                self.reference_logprobs,
                None if self.critic is None else self.critic_values,
            )
        )
        lr = float(self.scheduler.get_last_lr()[0])
        self.optimizer.zero_grad(set_to_none=True)
        # a micro-batch weighs its share of the action tokens (accumulation "token") or rows
        groups = self._micro_batches(batch, rows_per_unit(loss_fn))
        counts = [sum(int(np.sum(batch.action_mask[i])) for i in g) for g in groups]
        if accumulation_of(loss_fn, self.config) != "token" or sum(counts) == 0:
            counts = [len(g) for g in groups]
        total_loss, sums = self._accumulate(
            batch,
            loss_fn,
            [c / sum(counts) for c in counts],
            BatchUnits.of(batch.action_mask, batch.expert),
        )
        grad_norm, skipped = self._apply_gradients()
        if batch.critic_targets is not None:
            values |= self._critic_update(batch, batch.critic_targets)
        if on_gpu:  # the step's peak of what torch allocated on the trainer's GPU
            values["gpu_peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        return {
            **values,
            **sums,
            "loss": total_loss,
            "grad_norm": grad_norm,
            "lr": lr,
            "skipped": float(skipped),
            "sequences": float(len(batch)),
            "action_tokens": float(sum(int(np.sum(m)) for m in batch.action_mask)),
        }

    def _accumulate(
        self,
        batch: TrainBatch,
        loss_fn: LossFn,
        weights: list[float],
        batch_units: BatchUnits | None = None,
    ) -> tuple[float, dict[str, float]]:
        """Backward of sum_k weights[k] * loss(micro-batch k); returns that sum and the
        equally weighted sums of the loss's metrics. The policy, its entropy and the reference
        are all at each row's temperature (see `reference_logprobs` for why the reference too).
        Each micro-batch's LossBatch carries `batch_units` (of the whole batch, which `batch`
        may be a shard of) and its weight."""
        # the loss and tensor metrics add up on the device and come to the host once, at the end:
        # reading each one after its micro-batch made the host wait for the GPU every time
        total_loss: torch.Tensor | float = 0.0
        sums: dict[str, torch.Tensor | float] = {}
        groups = self._micro_batches(batch, rows_per_unit(loss_fn))
        for k, idx in enumerate(groups):
            t = self._collate(batch, idx)
            ids, attention, temperature = t["input_ids"], t["attention_mask"], t["temperature"]
            start = int(t["response_start"].item())
            with self._autocast():
                ref = None
                if self.ref_model is not None and self.config.ref_in_loss:
                    with torch.no_grad():
                        ref, _ = self._logprobs(self.ref_model, ids, attention, start, temperature)
                logprob, entropy = self._logprobs(self.model, ids, attention, start, temperature)
                if self.config.autocast_dtype is not None:
                    # the loss math runs in float32 whatever the forward's precision
                    logprob, entropy = logprob.float(), entropy.float()
                loss, metrics = loss_fn(
                    logprob,
                    entropy,
                    LossBatch(
                        action_mask=t["action_mask"],
                        old_logprob=t["old_logprobs"],
                        advantages=t["advantages"],
                        ref_logprob=ref,
                        expert=t.get("expert"),
                        batch_units=batch_units,
                        share=weights[k],
                        step=self.step + 1,
                    ),
                )
            if loss.dim() != 0:
                raise EngineError(f"loss_fn must return a scalar loss, got shape {loss.shape}")
            self._before_backward(last=k == len(groups) - 1)
            (loss * weights[k]).backward()
            total_loss = total_loss + loss.detach().double() * weights[k]
            for name, value in metrics.items():
                term = (
                    value.detach().double() if isinstance(value, torch.Tensor) else float(value)
                ) * weights[k]
                sums[name] = sums.get(name, 0.0) + term
        return _host_float(total_loss), {name: _host_float(v) for name, v in sums.items()}

    def _before_backward(self, *, last: bool) -> None:
        """Called before each micro-batch's backward (`last`: the step's last one); the sharded
        engine defers its gradient reduction to the last."""

    def _apply_gradients(self) -> tuple[float, bool]:
        """Clip, step AdamW (unless the gradient norm is not finite) and the LR schedule."""
        clip = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self._params, clip)
        # sharded parameters give a sharded norm: every rank holds the same full value
        full = getattr(norm, "full_tensor", None)
        grad_norm = float(full() if full is not None else norm)
        skipped = not math.isfinite(grad_norm)
        if skipped:
            self.optimizer.zero_grad(set_to_none=True)
        elif self.config.optimizer_offload:
            # AdamW's moments live on the CPU between steps: on the device only for the update
            # (with FSDP2's param_offload the parameters, and so the update, are on the CPU)
            self._move_optimizer_state(self._params[0].device)
            self.optimizer.step()
            self._move_optimizer_state(torch.device("cpu"))
        else:
            self.optimizer.step()
        with warnings.catch_warnings():
            # a skipped first update makes torch warn about the call order; the schedule still
            # follows train steps, which is what we want
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()
        self.step += 1
        return grad_norm, skipped

    def _move_optimizer_state(self, device: torch.device) -> None:
        """AdamW's per-parameter tensors (moments) to `device`; its step counters stay put."""
        for state in self.optimizer.state.values():
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and name != "step":
                    state[name] = value.to(device, non_blocking=device.type == "cpu")
        if device.type == "cpu" and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _autocast(self) -> Any:
        """bf16 compute for the forward when configured; the parameters stay in their dtype."""
        if self.config.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def _logprobs(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        start: int,
        temperature: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return token_logprobs(
            model,
            input_ids,
            attention_mask,
            temperature,
            start=start,
            chunk_tokens=self.config.logprob_chunk_tokens,
        )

    @torch.no_grad()
    def reference_logprobs(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        """The reference model's log-probability of every response token, for reward shaping.

        Returns [B, R] float tensors on the CPU, R the longest response, zero-padded:
        `ref_logprobs`, and `old_logprobs` and `action_mask` padded the same way.

        Each row is scored at its own temperature, the one its old logprobs were recorded at: a
        KL estimate compares log π_old (at T) with log π_ref, and only with both at the same T is
        it zero when the weights agree. A reference at T = 1 against a rollout at T = 0.7 would
        count the temperature itself as divergence and penalise the policy for its own weights.
        """
        if self.ref_model is None:
            raise EngineError("reference_logprobs needs a reference model (use_ref_model)")
        batch.validate()
        width = max(len(r) for r in batch.response_ids)
        out = {
            name: torch.zeros((len(batch), width), dtype=torch.float32)
            for name in ("ref_logprobs", "old_logprobs", "action_mask")
        }
        for idx in self._micro_batches(batch):
            lo = idx[0]
            tensors = self._collate(batch, idx)
            with self._autocast():
                ref, _ = self._logprobs(
                    self.ref_model,
                    tensors["input_ids"],
                    tensors["attention_mask"],
                    int(tensors["response_start"].item()),
                    tensors["temperature"],
                )
            r = ref.shape[1]
            padded = ref.float() * tensors["response_mask"].float()
            out["ref_logprobs"][lo : lo + len(idx), :r] = padded.cpu()
            for name in ("old_logprobs", "action_mask"):
                out[name][lo : lo + len(idx), :r] = tensors[name].float().cpu()
        return out

    @torch.no_grad()
    def critic_values(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        """The critic's value of every response token: [B, R] CPU tensors `values` and
        `action_mask` (R the longest response, zero-padded)."""
        if self.critic is None:
            raise EngineError("critic_values needs a critic (algorithm.use_critic)")
        width = max(len(r) for r in batch.response_ids)
        dtype = torch.float64 if self.dtype == torch.float64 else torch.float32
        out = {
            name: torch.zeros((len(batch), width), dtype=dtype)
            for name in ("values", "action_mask")
        }
        for idx in self._micro_batches(batch):
            lo = idx[0]
            t = self._collate(batch, idx)
            r = t["action_mask"].shape[1]
            with self._autocast():
                v = self.critic.model(
                    t["input_ids"], t["attention_mask"], int(t["response_start"].item()), r
                )
            out["values"][lo : lo + len(idx), :r] = (v.to(dtype) * t["response_mask"]).cpu()
            out["action_mask"][lo : lo + len(idx), :r] = t["action_mask"].to(dtype).cpu()
        return out

    def _critic_update(self, batch: TrainBatch, targets: CriticTargets) -> dict[str, float]:
        """One AdamW step of the critic on the clipped value loss over the learner rows,
        micro-batched and weighted as the policy's loss; metrics named critic/<name>."""
        critic = self.critic
        assert critic is not None
        rows = batch if len(targets.rows) == len(batch) else batch.select(targets.rows)
        groups = self._micro_batches(rows)
        counts = [sum(int(np.sum(rows.action_mask[i])) for i in g) for g in groups]
        if self.config.accumulation != "token" or sum(counts) == 0:
            counts = [len(g) for g in groups]
        critic.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for k, idx in enumerate(groups):
            t = self._collate(rows, idx)
            mask = t["action_mask"]
            r = mask.shape[1]
            index = torch.tensor(idx, dtype=torch.long)
            with self._autocast():
                v = critic.model(
                    t["input_ids"], t["attention_mask"], int(t["response_start"].item()), r
                )
            loss, metrics = clipped_value_loss(
                v.to(mask.dtype),
                targets.returns[index, :r].to(device=mask.device, dtype=mask.dtype),
                targets.old_values[index, :r].to(device=mask.device, dtype=mask.dtype),
                mask,
                critic.config.cliprange_value,
                critic.config.loss_agg_mode,
            )
            weight = counts[k] / sum(counts)
            (loss * weight).backward()
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + value * weight
        norm, skipped = critic.apply_gradients()
        return {
            **{f"critic/{k}": v for k, v in sums.items()},
            "critic/grad_norm": norm,
            "critic/skipped": float(skipped),
            "critic/lr": critic.config.lr,
        }

    def set_reference_model(self, model: Any) -> None:
        """Score `reference_logprobs` with `model` (a teacher, loaded by the caller on this
        engine's device), frozen: eval mode, no gradients, never a weight version."""
        model.eval()
        model.requires_grad_(False)
        self.ref_model = model

    def _micro_batches(self, batch: TrainBatch, unit: int = 1) -> list[list[int]]:
        """Row indices of each micro-batch, in order (never cutting a unit of `unit` rows)."""
        return split_micro_batches(batch, self.config, unit)

    def _collate(self, batch: TrainBatch, idx: list[int]) -> dict[str, torch.Tensor]:
        """Prompts left padded to P, responses right padded to R: response j is column P + j.

        `temperature` is [b], one per row; every other float tensor is [b, R].
        """
        p_len = max(len(batch.prompt_ids[i]) for i in idx)
        r_len = max(len(batch.response_ids[i]) for i in idx)
        b = len(idx)
        pad = self.pad_token_id
        input_ids = torch.full((b, p_len + r_len), pad, dtype=torch.long)
        attention = torch.zeros((b, p_len + r_len), dtype=torch.long)
        fdtype = self.dtype if self.dtype.is_floating_point else torch.float32
        fdtype = torch.float64 if fdtype == torch.float64 else torch.float32

        def per_token(values: list[Any]) -> torch.Tensor:
            out = torch.zeros((b, r_len), dtype=fdtype)
            for row, i in enumerate(idx):
                v = np.asarray(values[i], dtype=np.float64)
                r = len(batch.response_ids[i])
                out[row, :r] = torch.from_numpy(v) if v.ndim else float(v)
            return out

        for row, i in enumerate(idx):
            prompt, response = batch.prompt_ids[i], batch.response_ids[i]
            input_ids[row, p_len - len(prompt) : p_len] = torch.as_tensor(list(prompt))
            input_ids[row, p_len : p_len + len(response)] = torch.as_tensor(list(response))
            attention[row, p_len - len(prompt) : p_len + len(response)] = 1
        response_mask = attention[:, p_len:].to(fdtype)
        # a sequence's advantage spreads over its row; token advantages keep their columns
        if batch.advantages is None:
            advantages = torch.zeros((b, r_len))
        else:
            advantages = batch.advantages[torch.tensor(idx, dtype=torch.long)]
            if advantages.dim() == 1 or advantages.shape[1] == 1:
                advantages = advantages.reshape(-1, 1).expand(-1, r_len)
            else:
                advantages = advantages[:, :r_len]
        tensors = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "response_start": torch.tensor(p_len - 1),
            "temperature": torch.tensor(
                [1.0 if batch.temperatures is None else batch.temperatures[i] for i in idx],
                dtype=fdtype,
            ),
            "old_logprobs": per_token(batch.old_logprobs),
            "action_mask": per_token(batch.action_mask) * response_mask,
            "response_mask": response_mask,
            "advantages": advantages.to(fdtype) * response_mask,
        }
        if batch.expert is not None:
            tensors["expert"] = batch.expert[torch.tensor(idx, dtype=torch.long)].to(torch.bool)
        return {
            # a host number: reading it from the GPU would make the host wait for the GPU
            k: v if k == "response_start" else self._to_device(v)
            for k, v in tensors.items()
        }

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` on the engine's device. To a GPU it goes from pinned memory without waiting:
        a copy from pageable memory makes the host wait for all the GPU's queued work first, so
        the host could not prepare the next micro-batch while the GPU runs this one. (torch
        keeps the pinned block until the copy is done.)"""
        if self.device.type != "cuda":
            return tensor.to(self.device)
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def state_dict_for_export(self) -> dict[str, torch.Tensor]:
        """Weights under HF names on CPU; a tied lm_head appears once, as the input embedding."""
        return export_state_dict(self.model)

    def export_weights(
        self, dtype: torch.dtype | None = None, *, owned: bool = False
    ) -> dict[str, torch.Tensor]:
        state = self.model.state_dict()
        return host_tensors(
            {name: state[name] for name in export_state_dict_names(state)}, dtype, owned=owned
        )

    def save_hf(
        self, directory: str | Path, dtype: torch.dtype | None = None, *, weights: bool = True
    ) -> Path:
        """Write an HF directory (config.json, model.safetensors, tokenizer files), the weights
        in `dtype` (default: the model's own; a tied lm_head is stored once, as the embedding).
        Without `weights`: config, generation config and tokenizer files only."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        try:
            if not weights:
                self.model.config.save_pretrained(str(path))
                if getattr(self.model, "generation_config", None) is not None:
                    self.model.generation_config.save_pretrained(str(path))
            elif dtype is None or dtype == self.dtype:
                self.model.save_pretrained(str(path))
            else:
                self.model.config.save_pretrained(str(path))
                self.save_weights(path / "model.safetensors", dtype)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(str(path))
        except (OSError, RuntimeError, ValueError) as exc:
            raise EngineError(f"{path}: cannot save model: {exc}") from exc
        return path

    def save_weights(self, file: str | Path, dtype: torch.dtype | None = None) -> None:
        """The exported weights (HF names) as one safetensors file, in `dtype` if given."""
        from safetensors.torch import save_file

        tensors = self.state_dict_for_export()
        if dtype is not None:
            tensors = {k: v.to(dtype) for k, v in tensors.items()}
        try:
            save_file(tensors, str(file), metadata={"format": "pt"})
        except (OSError, RuntimeError, ValueError) as exc:
            raise EngineError(f"{file}: cannot save weights: {exc}") from exc

    def load_hf_weights(self, directory: str | Path) -> None:
        """Copy the weights of an HF directory into the model (for resume); optimizer untouched."""
        self.load_weights(read_safetensors_dir(directory))

    def load_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy `tensors` (HF names, every model tensor) into the model in place."""
        load_weights_into(self.model, tensors)

    def version_extra(self) -> dict[str, str]:
        """Full weights: nothing to add to a manifest."""
        return {}

    def training_state(self) -> dict[str, Any]:
        """Optimizer + scheduler + step counter, for an exact resume: a CPU copy."""
        return cpu_snapshot(
            {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": self.step,
            }
        )

    def reserve_version_copies(
        self, export_dtype: torch.dtype | None, with_master: bool
    ) -> threading.Thread | None:
        """On a GPU: pinned blocks for every trained parameter's copies (`version_copy_sizes`:
        exported, AdamW's two moments, the master copy), set aside by
        rft.engines.state_snapshot.reserve_pinned. On the CPU the copies are clones or casts:
        no pinned memory."""
        if self.device.type != "cuda":
            return None
        return reserve_pinned(version_copy_sizes(self._params, export_dtype, with_master))

    def skip_to_step(self, step: int) -> None:
        """Continue the LR schedule at `step` with fresh optimizer moments (no saved state)."""
        with warnings.catch_warnings():
            # stepping the scheduler without optimizer steps is the point here
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            for _ in range(step - self.step):
                self.scheduler.step()
        self.step = step

    def restore_training_state(self, state: dict[str, Any], source: str) -> None:
        try:
            # the optimizer moves each moment to its parameter's device and dtype
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.step = int(state["step"])
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise EngineError(f"{source}: cannot load optimizer state: {exc}") from exc

    def close(self) -> None:
        """Nothing outside this process to release."""


TrainerEngineFactory = Callable[[Any, Any, TorchTrainerConfig, TrainerPlacement], TrainerEngine]
"""factory(model, tokenizer, config, placement) -> engine; `model` is loaded on
placement.devices[0] in the master dtype (float32 unless float64)."""


@dataclass(frozen=True)
class TrainerEngineSpec(PartSpec):
    """What a trainer engine's entry declares.

    - `many_ranks`: it runs over trainer.world_size ranks (one GPU each on GPUs); an engine
      without it runs one rank in the trainer's process;
    - `sharded_by`: Trinity's trainer_strategy -> the entry that runs this engine sharded;
    - `critic`: it can train a critic beside the policy (`attach_critic`);
    - `lora`: it trains an adapter when model.lora_configs names one;
    - `teacher`: it scores a distillation teacher as its reference model (set_reference_model);
    - `param_offload`: it can keep parameters on the CPU (trainer.param_offload).
    """

    many_ranks: bool = False
    sharded_by: Mapping[str, str] = field(default_factory=dict)
    critic: bool = False
    lora: bool = False
    teacher: bool = False
    param_offload: bool = False


# an entry's own check and the rule (rft.engines.trainer_checks) are given the config and the
# AlgorithmSpec it resolves to (None when its algorithm keys are wrong)
TRAINER_ENGINES: Registry[TrainerEngineFactory, TrainerEngineSpec] = Registry(
    "trainer.trainer_type", TrainerEngineSpec, rule="rft.engines.trainer_checks:engine_issues"
)


@TRAINER_ENGINES.register(
    "torch", many_ranks=False, sharded_by={"fsdp2": "fsdp2"}, critic=True, lora=True, teacher=True
)
def torch_trainer_engine(
    model: Any, tokenizer: Any, config: TorchTrainerConfig, placement: TrainerPlacement
) -> TorchTrainerEngine:
    """AdamW in this process, on one device (CPU or GPU), with the model as loaded, or on a
    LoRA adapter of it (`config.lora`)."""
    if placement.world_size != 1:
        raise ConfigError(
            f"trainer.world_size: the torch engine runs one rank, got {placement.world_size}; "
            "set trainer.trainer_type: fsdp2 to shard over several"
        )
    if config.lora is not None:
        adapter_engine: Callable[..., TorchTrainerEngine] = ADAPTER_TRAINERS.get("lora")
        return adapter_engine(model, config, config.lora, tokenizer=tokenizer)
    return TorchTrainerEngine(model, config, tokenizer=tokenizer)


# the torch engine training an adapter of its model instead of the model (model.lora_configs)
ADAPTER_TRAINERS: Registry[Callable[..., TorchTrainerEngine]] = Registry("model.lora_configs")
ADAPTER_TRAINERS.lazy("lora", "rft.engines.lora_trainer:LoraTrainerEngine")


TRAINER_ENGINES.lazy(
    "fsdp2", "rft.engines.fsdp_engine:build_fsdp2_engine", many_ranks=True, param_offload=True
)


def _host_float(value: torch.Tensor | float) -> float:
    return float(value.item()) if isinstance(value, torch.Tensor) else float(value)
