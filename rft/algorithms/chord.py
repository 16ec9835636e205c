"""CHORD (Trinity-RFT's `mix_chord` policy loss): the SFT loss of demonstrations inside RL batches,
weighted by a schedule of the train step and, per token, by the model's own confidence.

Over a batch that mixes rollouts (learner rows) and demonstrations (expert rows, the `mix` sample
strategy), with s the number of the optimizer step being taken (1 for the first):

    L = (1 - μ(s)) L_ppo + μ(s) L_sft
    μ(s) = μ_peak · s / w                                   for s < w   (warmup)
    μ(s) = μ_valley + (μ_peak - μ_valley) · (1 + cos(π (s - w) / d)) / 2   for w <= s < w + d
    μ(s) = μ_valley                                         for s >= w + d
    (w = mu_warmup_steps, d = mu_decay_steps)
    L_sft = mean over expert tokens of  -log p_t · φ(p_t),  φ(p) = p (1 - p)   (enable_phi_function)
          or of  -log p_t  (enable_phi_function false);  φ is held constant in the gradient

L_ppo is the PPO-clip surrogate averaged over the learner rows of the whole batch and L_sft over the
expert rows of the whole batch, as in `mix` (rft.algorithms.expert_rows.mixed_loss); with
use_token_level_loss_in_sft false L_sft averages per row first (seq-mean-token-mean). φ weighs
down the tokens the model is already sure of (p near 1) and those it finds unlikely (p near 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rft.algorithms.policy_losses import ppo_policy_loss
from rft.algorithms.tensor_checks import AlgorithmInputError


def chord_mu(
    step: int,
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
) -> float:
    """μ(step): linear warmup to mu_peak, cosine decay to mu_valley, then mu_valley (module
    docstring)."""
    if step < mu_warmup_steps:
        return step / mu_warmup_steps * mu_peak
    if step >= mu_warmup_steps + mu_decay_steps:
        return mu_valley
    progress = (step - mu_warmup_steps) / mu_decay_steps
    return mu_valley + (mu_peak - mu_valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


def phi_token_losses(logprob: torch.Tensor) -> torch.Tensor:
    """-log p_t · φ(p_t), φ(p) = p (1 - p) taken without gradient."""
    p = torch.exp(logprob.detach())
    return -logprob * (p * (1.0 - p))


def nll_token_losses(logprob: torch.Tensor) -> torch.Tensor:
    """-log p_t (plain SFT)."""
    return -logprob


@dataclass(frozen=True)
class ExpertWeighting:
    """How a mixing loss weighs its demonstration rows: μ of the step, the SFT loss of each
    demonstration token, the mode that averages it, and the policy loss's args without the ones
    this weighting took."""

    mu: Callable[[int], float]
    token_losses: Callable[[torch.Tensor], torch.Tensor]
    sft_agg_mode: str | None  # None: the algorithm's loss_agg_mode
    policy_args: dict[str, Any]


_SCHEDULE_ARGS = ("mu_warmup_steps", "mu_decay_steps", "mu_peak", "mu_valley")


def chord_weighting(args: Mapping[str, Any]) -> ExpertWeighting:
    """The `expert_schedule` of `mix_chord`: its schedule and SFT args taken out of `args`
    (policy_loss_fn_args), checked; defaults are mix_chord_policy_loss's."""
    rest = dict(args)
    defaults = {"mu_warmup_steps": 0, "mu_decay_steps": 0, "mu_peak": 0.1, "mu_valley": 0.1}
    schedule = {k: rest.pop(k, defaults[k]) for k in _SCHEDULE_ARGS}
    for key in ("mu_warmup_steps", "mu_decay_steps"):
        value = schedule[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise AlgorithmInputError(
                f"policy_loss_fn_args.{key}: must be a whole number >= 0, got {value!r}"
            )
    for key in ("mu_peak", "mu_valley"):
        value = schedule[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise AlgorithmInputError(
                f"policy_loss_fn_args.{key}: must be in [0, 1], got {value!r}"
            )
    phi = bool(rest.pop("enable_phi_function", True))
    token_level = bool(rest.pop("use_token_level_loss_in_sft", True))

    def mu(step: int) -> float:
        return chord_mu(step, **schedule)

    return ExpertWeighting(
        mu=mu,
        token_losses=phi_token_losses if phi else nll_token_losses,
        sft_agg_mode="token-mean" if token_level else "seq-mean-token-mean",
        policy_args=rest,
    )


def mix_chord_policy_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
    enable_phi_function: bool = True,
    use_token_level_loss_in_sft: bool = True,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Trinity-RFT's `mix_chord`: the PPO-clip surrogate on the rollout rows. The schedule and
    SFT args (module docstring) are applied by the objective across the batch (the entry's
    trait `expert_schedule`, `chord_weighting`), so this function sees learner rows only."""
    clip = {"clip_range": clip_range, "clip_range_low": clip_range_low}
    clip["clip_range_high"] = clip_range_high
    return ppo_policy_loss(logprob, old_logprob, advantages, action_mask, loss_agg_mode, **clip)
