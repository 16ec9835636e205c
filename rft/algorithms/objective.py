"""One algorithm's training objective, composed from its registered parts.

`build_loss(spec)` returns an AlgorithmLoss, the `LossFn` the trainer engine calls with the
current log-probabilities (and entropy) of a micro-batch and its `LossBatch`; it gets one scalar
to backpropagate:
    loss = policy_loss + kl_coef * kl_loss + entropy_term,  entropy_term = -entropy_coef * H
(demonstration rows, `LossBatch.expert`, take the SFT loss instead: `rft.algorithms.expert_rows`).
`Advantages(spec)` (and `compute_advantages(spec, ...)`) turns sequence rewards into the token
advantages the loss uses.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from rft.algorithms.advantages import ADVANTAGE_FN, broadcast_advantages
from rft.algorithms.aggregation import masked_mean
from rft.algorithms.chord import ExpertWeighting, nll_token_losses
from rft.algorithms.entropy import ENTROPY_LOSS_FN
from rft.algorithms.expert_rows import BatchUnits, expert_row_loss, loss_units, mixed_loss
from rft.algorithms.gae import ValueTargets
from rft.algorithms.kl import KL_FN, apply_kl_penalty
from rft.algorithms.overlong import overlong_penalty
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.presets import ALGORITHM_TYPES, AlgorithmSpec, resolve_algorithm, validate_spec
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.registry import load_dotted


@dataclass
class LossBatch:
    """Per-token tensors [B, T] of a training batch that do not depend on the current weights.

    action_mask: 1 on the tokens trained, 0 on padding and on tokens not trained.
    old_logprob: log-probabilities under the rollout (behaviour) policy, from the Experience
        events.
    advantages: token advantages (see compute_advantages); None for algorithms without them.
    ref_logprob: reference-model log-probabilities; needed only when spec.use_reference.
    prox_logprob: log-probabilities under the proximal policy (the weights before this
        optimizer step), for losses that declare `prox_logprob` (decoupled_ppo). None: the
        loss takes the recomputed logprob.detach(), which is exact while the trainer takes one
        optimizer step per batch; a trainer taking several must record them before its first
        step and set them here.
    expert: [B] bool, True on demonstration rows (they take the SFT loss); None: none.
    batch_units / share: the units of the whole batch this micro-batch belongs to, and the weight
        the engine gives its loss; read by a loss that weighs learner and expert rows by a fixed
        weight (`mix`, rft.algorithms.expert_rows.mixed_loss), and by the objective to weigh a
        micro-batch by its share of what `loss_agg_mode` averages (rows for a seq-mean mode,
        where the engine weighs tokens). None / 1: this is the batch.
    step: the number of the optimizer step this batch is trained in (1 for a run's first), for a
        loss whose weights follow a schedule (mix_chord's μ, rft.algorithms.chord).
    """

    action_mask: torch.Tensor
    old_logprob: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    ref_logprob: torch.Tensor | None = None
    prox_logprob: torch.Tensor | None = None
    expert: torch.Tensor | None = None
    batch_units: BatchUnits | None = None
    share: float = 1.0
    step: int = 1


class LossFn(Protocol):
    """The one loss signature of the trainer engines.

    loss(logprob [B, T], entropy [B, T] or None, batch) -> (scalar loss, metrics); `logprob`
    carries the gradient. The loss must be a mean over its micro-batch: the engine weights each
    micro-batch by its share of the batch (TorchTrainerConfig.accumulation). Metric values are
    floats or 0-d tensors.
    """

    def __call__(
        self, logprob: torch.Tensor, entropy: torch.Tensor | None, batch: LossBatch
    ) -> tuple[torch.Tensor, dict[str, Any]]: ...


class AlgorithmLoss:
    """The composed objective of one AlgorithmSpec (a `LossFn`); call it once per micro-batch."""

    def __init__(self, spec: AlgorithmSpec) -> None:
        validate_spec(spec)
        self.spec = spec
        self.loss_agg_mode = spec.effective_loss_agg_mode
        # the KL term, or a policy loss that reads the reference itself (dpo)
        self._policy_reads_reference = spec.policy_reads_reference
        self.needs_reference = spec.uses_kl_loss or self._policy_reads_reference
        self.needs_entropy = spec.use_entropy
        # rows that must share a micro-batch and a rank: a pair of a chosen and a rejected
        # response for a loss over adjacent pairs (its trait `paired`: dpo), else each row
        self.rows_per_unit = 2 if POLICY_LOSS_FN.spec(spec.policy_loss_fn).paired else 1
        # how micro-batch losses combine when the loss has its own unit (trait `accumulation`:
        # dpo's is a mean over pairs, so micro-batches weigh their rows, not their tokens)
        self.accumulation: str | None = POLICY_LOSS_FN.spec(spec.policy_loss_fn).accumulation
        self._policy_fn = POLICY_LOSS_FN.get(spec.policy_loss_fn)
        self._policy_args = spec.policy_args()
        # a policy loss that weighs demonstration rows by a fixed arg (mix's mu) names it by its
        # trait; the objective applies that weight across the batch, the function never sees it
        weight_arg = POLICY_LOSS_FN.spec(spec.policy_loss_fn).expert_weight
        # one that weighs them by a schedule of the step (mix_chord's μ) names the function that
        # builds its ExpertWeighting from its args, which it takes out of the policy's
        schedule = POLICY_LOSS_FN.spec(spec.policy_loss_fn).expert_schedule
        self._expert_weighting: ExpertWeighting | None = None
        if schedule is not None:
            self._expert_weighting = load_dotted(schedule)(self._policy_args)
            self._policy_args = dict(self._expert_weighting.policy_args)
        elif weight_arg is not None:
            default = inspect.signature(self._policy_fn).parameters[weight_arg].default
            mu = float(self._policy_args.pop(weight_arg, default))
            self._expert_weighting = ExpertWeighting(
                mu=lambda _step: mu,
                token_losses=nll_token_losses,
                sft_agg_mode=None,
                policy_args=self._policy_args,
            )
        self._takes_prox = "prox_logprob" in inspect.signature(self._policy_fn).parameters
        self._kl_fn = KL_FN.get(spec.kl_loss_fn)
        self._kl_args = spec.kl_loss_args()
        self._kl_coef = spec.kl_coef
        self._entropy_fn = ENTROPY_LOSS_FN.get(spec.entropy_loss_fn)
        self._entropy_args = spec.entropy_args()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # travels by name (the fsdp2 trainer engine sends it to its other ranks): the receiver
        # imports the parts' modules, so plugin parts register there too, and looks them up
        modules = sorted(
            {fn.__module__ for fn in (self._policy_fn, self._kl_fn, self._entropy_fn)}
            | (
                {ADVANTAGE_FN.get(self.spec.advantage_fn).__module__}
                if self.spec.advantage_fn
                else set()
            )
        )
        return _rebuilt_loss, (self.spec, tuple(modules))

    def __call__(
        self, logprob: torch.Tensor, entropy: torch.Tensor | None, batch: LossBatch
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """loss = policy + kl_coef * kl + (-entropy_coef * H); metrics of every term plus "loss".

        `entropy` may be None when `needs_entropy` is False; `batch.ref_logprob` may be None when
        `needs_reference` is False. Terms with a zero coefficient are skipped entirely. The
        token entropy is reported ("entropy") even when no entropy term is trained: collapse
        shows there first. With `batch.expert`, see `expert_row_loss`.
        """
        if batch.expert is not None or self._expert_weighting is not None:
            return self._with_demonstrations(logprob, entropy, batch)  # weighs its own rows
        loss, metrics = self._rollout_loss(logprob, entropy, batch)
        factor = self._exact_share(batch)
        if factor != 1.0:
            loss = loss * factor
            metrics["loss"] = float(loss.detach())
        return loss, metrics

    def _rollout_loss(
        self, logprob: torch.Tensor, entropy: torch.Tensor | None, batch: LossBatch
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The algorithm's own terms over `batch.action_mask` (no demonstration rows)."""
        mode = self.loss_agg_mode
        extra = {"prox_logprob": batch.prox_logprob} if self._takes_prox else {}
        if self._policy_reads_reference:
            if batch.ref_logprob is None:
                raise AlgorithmInputError(
                    f"policy_loss_fn {self.spec.policy_loss_fn!r} needs batch.ref_logprob"
                )
            extra["ref_logprob"] = batch.ref_logprob
        loss, metrics = self._policy_fn(
            logprob,
            batch.old_logprob,
            batch.advantages,
            batch.action_mask,
            mode,
            **extra,
            **self._policy_args,
        )
        if self.spec.uses_kl_loss:
            if batch.ref_logprob is None:
                raise AlgorithmInputError(
                    f"kl_loss_fn {self.spec.kl_loss_fn!r} with kl_coef {self._kl_coef} "
                    "needs batch.ref_logprob"
                )
            kl, kl_metrics = self._kl_fn(
                logprob, batch.ref_logprob, batch.action_mask, mode, **self._kl_args
            )
            loss = loss + self._kl_coef * kl
            metrics.update(kl_metrics)
            metrics["kl_coef"] = self._kl_coef
        if self.needs_entropy:
            if entropy is None:
                raise AlgorithmInputError(
                    f"entropy_loss_fn {self.spec.entropy_loss_fn!r} with entropy_coef "
                    f"{self.spec.entropy_coef} needs the token entropy"
                )
            term, entropy_metrics = self._entropy_fn(
                entropy, batch.action_mask, mode, **self._entropy_args
            )
            loss = loss + term
            metrics.update(entropy_metrics)
        if "entropy" not in metrics and entropy is not None:
            metrics["entropy"] = float(masked_mean(entropy.detach(), batch.action_mask))
        metrics["loss"] = float(loss.detach())
        return loss, metrics

    def _exact_share(self, batch: LossBatch) -> float:
        """The factor that makes the engine's weighting of this micro-batch (`share`, by tokens
        or rows) its share of the units `loss_agg_mode` averages over (rows for a seq-mean
        mode), so that a batch split into micro-batches trains the loss of the whole batch: 1
        when they agree (token-mean under token accumulation), when the loss names its own
        accumulation (dpo), or when this micro-batch is the batch."""
        units = batch.batch_units
        if self.accumulation is not None or units is None or batch.share <= 0:
            return 1.0
        total = units.units(self.loss_agg_mode)[0]
        if total <= 0:
            return 1.0
        factor = loss_units(batch.action_mask, self.loss_agg_mode) / total / batch.share
        return 1.0 if abs(factor - 1.0) < 1e-12 else factor

    def _with_demonstrations(
        self, logprob: torch.Tensor, entropy: torch.Tensor | None, batch: LossBatch
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The algorithm's loss on learner rows, SFT on the `batch.expert` rows: weighted by
        their units (`expert_row_loss`), or by the policy loss's fixed weight (`mixed_loss`)."""
        expert = batch.expert
        if expert is None:
            expert = torch.zeros(logprob.shape[0], dtype=torch.bool, device=logprob.device)
        learner = replace(batch, expert=None)

        def rl_loss(mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            return self._rollout_loss(logprob, entropy, replace(learner, action_mask=mask))

        weighting = self._expert_weighting
        if weighting is None:
            loss, metrics = expert_row_loss(
                rl_loss, logprob, batch.action_mask, expert, self.loss_agg_mode
            )
        else:
            loss, metrics = mixed_loss(
                rl_loss,
                logprob,
                batch.action_mask,
                expert,
                weighting.mu(batch.step),
                self.loss_agg_mode,
                batch.batch_units,
                batch.share,
                sft_token_losses=weighting.token_losses,
                sft_agg_mode=weighting.sft_agg_mode,
            )
        if entropy is not None and ("entropy" not in metrics or not self.needs_entropy):
            # over every row of the micro-batch, learner and demonstration alike
            metrics["entropy"] = float(masked_mean(entropy.detach(), batch.action_mask))
        return loss, metrics


def _rebuilt_loss(spec: AlgorithmSpec, modules: tuple[str, ...]) -> AlgorithmLoss:
    """An unpickled AlgorithmLoss: the modules of its parts imported, then built from `spec`."""
    import importlib

    for module in modules:
        importlib.import_module(module)
    return AlgorithmLoss(spec)


def build_loss(spec: AlgorithmSpec | str, cfg: Any = None) -> AlgorithmLoss:
    """Compose the objective of `spec` (an AlgorithmSpec or an algorithm_type name).

    With `cfg` (an `algorithm` config section), the section is resolved first via
    `resolve_algorithm`, its algorithm_type defaulting to `spec`'s.
    """
    if cfg is not None:
        base = spec if isinstance(spec, str) else spec.algorithm_type
        if isinstance(cfg, dict):
            cfg = {"algorithm_type": base, **{k: v for k, v in cfg.items() if v is not None}}
        spec = resolve_algorithm(cfg)
    elif isinstance(spec, str):
        spec = ALGORITHM_TYPES.get(spec)
    return AlgorithmLoss(spec)


class Advantages:
    """Token advantages of one algorithm from sequence rewards: reward shaping, then advantage_fn.

    r' = r + overlong_penalty(|y|) when spec.uses_overlong_penalty (dapo): |y| are
    `response_lengths` [B] (the trainer passes each row's count of mask-1 tokens) and the limit
    is the spec's overlong_penalty.max_response_length or else `max_response_length` (the
    trainer passes model.max_response_tokens); both are required then, never guessed from
    the mask (a trainer may pass a one-column mask for sequence advantages);
    r'' = r' - kl_penalty_coef * sum_t KL_t (only when spec.uses_kl_penalty, `needs_reference`;
    needs logprob and ref_logprob), a = advantage_fn(r'', group_index, **advantage_fn_args),
    A[b, t] = a[b] mask[b, t]. Algorithms without advantages (raft) get zeros.
    A teacher advantage fn (trait `teacher`, `needs_teacher`: on_policy_distill, jsd) takes no
    rewards: A = advantage_fn(logprob, teacher_logprob, action_mask, **advantage_fn_args), token
    advantages from the student's sampling logprobs (`logprob`) and the teacher's.
    A step-wise advantage fn (trait `steps`) also gets `trajectory_index` and `turn` [B]; any
    other refuses a batch whose trajectories have several steps (it would compare steps, and
    weigh a long trajectory by its length, instead of comparing trajectories).
    """

    def __init__(self, spec: AlgorithmSpec, max_response_length: int | None = None) -> None:
        self.spec = spec
        self.max_response_length = max_response_length
        self.needs_reference = spec.uses_kl_penalty
        self._overlong = spec.uses_overlong_penalty
        self._advantage_fn = (
            None if spec.advantage_fn is None else ADVANTAGE_FN.get(spec.advantage_fn)
        )
        self._advantage_args = spec.advantage_fn_args
        self._steps = spec.advantage_fn is not None and bool(
            ADVANTAGE_FN.spec(spec.advantage_fn).steps
        )
        # the advantage fn reads a critic's values: the engine calls `targets`, not this
        self.needs_values = spec.use_critic
        self.needs_teacher = spec.uses_teacher

    def __call__(
        self,
        rewards: torch.Tensor,
        group_index: torch.Tensor,
        action_mask: torch.Tensor,
        logprob: torch.Tensor | None = None,
        ref_logprob: torch.Tensor | None = None,
        *,
        response_lengths: torch.Tensor | None = None,
        trajectory_index: torch.Tensor | None = None,
        turn: torch.Tensor | None = None,
        teacher_logprob: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """A [B, T] (T = action_mask's width) and the shaping's and advantage_fn's metrics."""
        if self._advantage_fn is None:
            return torch.zeros(
                action_mask.shape, dtype=torch.float32, device=action_mask.device
            ), {}
        if self.needs_values:
            raise AlgorithmInputError(
                f"advantage_fn {self.spec.advantage_fn!r} reads a critic's values: use "
                "Advantages.targets with the batch's token rewards and values"
            )
        if self.needs_teacher:
            if logprob is None or teacher_logprob is None:
                raise AlgorithmInputError(
                    f"advantage_fn {self.spec.advantage_fn!r} needs logprob and teacher_logprob"
                )
            return self._advantage_fn(logprob, teacher_logprob, action_mask, **self._advantage_args)
        rewards, metrics = self._shaped(
            rewards, action_mask, logprob, ref_logprob, response_lengths
        )
        adv, adv_metrics = self._advantage_fn(
            rewards, group_index, **self._step_args(trajectory_index, turn), **self._advantage_args
        )
        metrics.update(adv_metrics)
        return broadcast_advantages(adv, action_mask), metrics

    def targets(
        self,
        rewards: torch.Tensor,
        token_rewards: torch.Tensor,
        values: torch.Tensor,
        action_mask: torch.Tensor,
        logprob: torch.Tensor | None = None,
        ref_logprob: torch.Tensor | None = None,
        *,
        response_lengths: torch.Tensor | None = None,
    ) -> tuple[ValueTargets, dict[str, float]]:
        """Advantages and returns [B, T] of a critic advantage fn (`needs_values`).

        token_rewards [B, T] are the rows' token-level rewards and `rewards` [B] their sequence
        rewards; the sequence shaping (overlong penalty, KL penalty) is computed on `rewards`
        as in `__call__` and what it adds to a row lands on its last mask-1 token. `values`
        [B, T] are the critic's, taken before this step.
        """
        if not self.needs_values:
            raise AlgorithmInputError(
                f"advantage_fn {self.spec.advantage_fn!r} reads no critic's values"
            )
        assert self._advantage_fn is not None
        shaped, metrics = self._shaped(rewards, action_mask, logprob, ref_logprob, response_lengths)
        delta = (shaped.to(torch.float64) - rewards.to(torch.float64)).to(token_rewards.dtype)
        token_rewards = token_rewards + at_last_token(delta, action_mask)
        targets, adv_metrics = self._advantage_fn(
            token_rewards, values, action_mask, **self._advantage_args
        )
        metrics.update(adv_metrics)
        return ValueTargets(*targets), metrics

    def _shaped(
        self,
        rewards: torch.Tensor,
        action_mask: torch.Tensor,
        logprob: torch.Tensor | None,
        ref_logprob: torch.Tensor | None,
        response_lengths: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The sequence rewards after the overlong and KL penalties, and their metrics."""
        spec = self.spec
        metrics: dict[str, float] = {}
        if self._overlong:
            rewards, metrics = _with_overlong_penalty(
                spec, rewards, response_lengths, self.max_response_length
            )
        if self.needs_reference:
            if logprob is None or ref_logprob is None:
                raise AlgorithmInputError(
                    f"kl_penalty_fn {spec.kl_penalty_fn!r} needs logprob and ref_logprob"
                )
            rewards, kl_metrics = apply_kl_penalty(
                rewards, logprob, ref_logprob, action_mask, spec.kl_penalty_fn, spec.kl_penalty_coef
            )
            metrics.update(kl_metrics)
        return rewards, metrics

    def _step_args(
        self, trajectory_index: torch.Tensor | None, turn: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        name = self.spec.advantage_fn
        if self._steps:
            if trajectory_index is None or turn is None:
                raise AlgorithmInputError(
                    f"advantage_fn {name!r} needs each row's trajectory_index and turn"
                )
            return {"trajectory_index": trajectory_index, "turn": turn}
        if trajectory_index is not None and (
            torch.unique(trajectory_index).numel() < trajectory_index.numel()
        ):
            raise AlgorithmInputError(
                f"advantage_fn {name!r} compares whole trajectories, but the batch has step-wise "
                "experiences (several per trajectory); use algorithm_type multi_step_grpo "
                "(advantage_fn step_wise_grpo)"
            )
        return {}


def at_last_token(per_row: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """[B, T]: each row's value `per_row[b]` on its last mask-1 token, 0 elsewhere (a row
    without one gets nothing). Where an outcome reward sits among token rewards."""
    m = action_mask > 0
    t = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last = torch.where(m, t, torch.full_like(t, -1)).amax(dim=1)
    out = torch.zeros(m.shape, dtype=per_row.dtype, device=per_row.device)
    rows = torch.nonzero(last >= 0).flatten()
    out[rows, last[rows]] = per_row[rows]
    return out


def compute_advantages(
    spec: AlgorithmSpec,
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    action_mask: torch.Tensor,
    logprob: torch.Tensor | None = None,
    ref_logprob: torch.Tensor | None = None,
    *,
    response_lengths: torch.Tensor | None = None,
    max_response_length: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token advantages [B, T] for a batch: `Advantages(spec, max_response_length)` applied."""
    return Advantages(spec, max_response_length)(
        rewards, group_index, action_mask, logprob, ref_logprob, response_lengths=response_lengths
    )


def _with_overlong_penalty(
    spec: AlgorithmSpec,
    rewards: torch.Tensor,
    response_lengths: torch.Tensor | None,
    max_response_length: int | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    args = dict(spec.overlong_penalty)
    args.setdefault("max_response_length", max_response_length)
    if args["max_response_length"] is None or response_lengths is None:
        raise AlgorithmInputError(
            f"{spec.algorithm_type}: the overlong penalty needs response_lengths (tokens per "
            "response) and max_response_length (model.max_response_tokens) from the trainer"
        )
    penalty = overlong_penalty(response_lengths, **args)
    shaped = (rewards.to(torch.float64) + penalty.to(rewards.device)).to(
        rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    )
    return shaped, {
        "overlong_penalty_mean": float(penalty.mean()) if penalty.numel() else 0.0,
        "overlong_frac": float((penalty < 0).to(torch.float64).mean()) if penalty.numel() else 0.0,
    }
