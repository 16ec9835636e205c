"""verl's `core_algos` as rft parts: the advantage estimators and policy losses both libraries have.

Each entry is registered under `verl/<rft name>` in ADVANTAGE_FN or POLICY_LOSS_FN, with rft's
signature, argument names and defaults, and computes with verl's function
(`verl.trainer.ppo.core_algos`, verl 0.9.1). `algorithm.implementation: verl` swaps the
algorithm's advantage fn and policy loss for these (`verl_counterparts`), so the same config runs
on either library; `tests/unit/test_verl_differential.py` runs both on the same inputs.

verl is imported when an entry first runs, not when this module loads: rft loads without it, and
a config that selects it is refused at load when it is missing (`VERL_INSTALL` says how to get it).

How rft's inputs reach verl's functions:
- Advantages: rft's are per sequence (`rewards[N]`); verl's take token-level rewards and a response
  mask. Each reward goes in as a one-token response (`[N, 1]`, mask 1), which for outcome rewards
  is what verl's trainer computes too; verl's REINFORCE++ whitening then weighs every response
  once (in verl's own trainer a response weighs by its token count). GAE (`verl/ppo`) takes
  token rewards, values and the mask as verl does, with rft's critic-fn signature.
- Policy losses: `old_logprob` / `logprob` swap places (verl takes the old first), the clip ranges
  travel in a verl `ActorConfig` (clip_range -> clip_ratio, ..._low / _high alike, clip_ratio_c),
  verl's metric names lose their `actor/` prefix, and a loss's `pg_loss` is added.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from rft.algorithms.advantages import (
    ADVANTAGE_FN,
    checked_rewards,
    group_stats,
    out_dtype,
    summary,
)
from rft.algorithms.policy_losses import POLICY_LOSS_FN, checked_inputs
from rft.algorithms.tensor_checks import AlgorithmInputError
from rft.errors import ConfigError

VERL_VERSION = "0.9.1"
VERL_INSTALL = (
    f"pip install --no-deps verl=={VERL_VERSION} 'tensordict==0.10.*' 'pyvers<0.2' codetiming "
    "cloudpickle orjson ray (or pip install -e '.[scale]' and the same --no-deps line for verl)"
)
PREFIX = "verl/"

# rft part -> its verl-backed entry, per registry (what `implementation: verl` swaps)
COUNTERPARTS: dict[str, dict[str, str]] = {
    "advantage_fn": {
        name: PREFIX + name for name in ("grpo", "rloo", "reinforce_plus_plus", "ppo", "gae")
    },
    "policy_loss_fn": {name: PREFIX + name for name in ("ppo", "gspo", "cispo", "sapo")},
}

# GSPO's published ranges for the sequence ratio, rft's gspo defaults (verl's config says 0.2)
GSPO_CLIP_LOW = 3e-4
GSPO_CLIP_HIGH = 4e-4


def verl_installed() -> bool:
    return importlib.util.find_spec("verl") is not None


def verl_counterparts(advantage_fn: str | None, policy_loss_fn: str) -> tuple[str | None, str]:
    """The verl-backed names of an algorithm's advantage fn and policy loss.

    Raises ConfigError (key `algorithm.implementation`) for a part verl does not have, or when
    verl is not installed.
    """
    if not verl_installed():
        raise ConfigError(
            f"algorithm.implementation: verl is not installed; install it with {VERL_INSTALL}"
        )
    parts: list[str | None] = []
    for key, name in (("advantage_fn", advantage_fn), ("policy_loss_fn", policy_loss_fn)):
        if name is None or name.startswith(PREFIX):
            parts.append(name)
            continue
        counterpart = COUNTERPARTS[key].get(name)
        if counterpart is None:
            raise ConfigError(
                f"algorithm.implementation: verl has no counterpart of {key} {name!r} "
                f"(verl-backed: {', '.join(sorted(COUNTERPARTS[key]))}); use implementation: rft"
            )
        parts.append(counterpart)
    return parts[0], str(parts[1])


@cache
def _core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        raise ConfigError(
            f"algorithm.implementation: verl cannot be imported ({exc}); install it with "
            f"{VERL_INSTALL}"
        ) from exc
    return core_algos


def _actor_config(**values: Any) -> Any:
    """A verl ActorConfig carrying only what the policy losses read."""
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **values)


# -- advantages --------------------------------------------------------------------------------


def _outcome_advantage(
    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's estimator `fn` on one-token responses: rewards [N] -> advantages [N]."""
    r = checked_rewards(rewards, group_index)
    stats = group_stats(r, group_index)
    token_rewards = r[:, None].clone()
    mask = torch.ones_like(token_rewards)
    adv, _ = fn(token_rewards, mask, index=group_index.cpu().numpy(), **kwargs)
    adv = adv[:, 0].to(torch.float64)
    return adv.to(out_dtype(rewards)), summary(r, adv, stats.counts.numel())


@ADVANTAGE_FN.register(PREFIX + "grpo")
def verl_grpo_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_grpo_outcome_advantage`.

    A_i = (r_i - mean_g) / (s_g + epsilon), s_g the *sample* std of group g (divisor n_g - 1);
    std_normalize=False (verl's norm_adv_by_std_in_grpo): A_i = r_i - mean_g. A group of one
    gets A_i = r_i / (1 + epsilon) (verl takes mean 0 and std 1 for it; rft's grpo gives 0).
    """
    return _outcome_advantage(
        _core_algos().compute_grpo_outcome_advantage,
        rewards,
        group_index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=std_normalize,
    )


@ADVANTAGE_FN.register(PREFIX + "rloo")
def verl_rloo_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_rloo_outcome_advantage`: A_i = n_g/(n_g - 1) (r_i - mean_g); a group of
    one keeps A_i = r_i (rft's rloo gives 0: there is no other rollout to compare with)."""
    return _outcome_advantage(_core_algos().compute_rloo_outcome_advantage, rewards, group_index)


@ADVANTAGE_FN.register(PREFIX + "reinforce_plus_plus")
def verl_reinforce_plus_plus_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor, group_baseline: bool = False
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_reinforce_plus_plus_outcome_advantage` (gamma 1), or with
    `group_baseline` its `compute_reinforce_plus_plus_baseline_outcome_advantage`.

    x_i = r_i (or r_i - mean_g; a group of one keeps r_i), then verl's masked whitening over the
    batch: A_i = (x_i - mean(x)) / sqrt(var_s(x) + 1e-8), var_s the sample variance (divisor
    N - 1). rft's reinforce_plus_plus divides by the population std + epsilon instead.
    """
    core = _core_algos()
    if group_baseline:
        return _outcome_advantage(
            core.compute_reinforce_plus_plus_baseline_outcome_advantage, rewards, group_index
        )
    from verl.trainer.config import AlgoConfig

    def whitened(
        token_rewards: torch.Tensor, mask: torch.Tensor, index: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result: tuple[torch.Tensor, torch.Tensor] = (
            core.compute_reinforce_plus_plus_outcome_advantage(
                token_rewards, mask, config=AlgoConfig(gamma=1.0)
            )
        )
        return result

    return _outcome_advantage(whitened, rewards, group_index)


def verl_gae_advantage(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[Any, dict[str, float]]:
    """verl's `compute_gae_advantage_return`: GAE over the mask-1 tokens, advantages whitened
    over the batch (rft's `gae_advantage` with whiten=True; verl always whitens)."""
    from rft.algorithms.gae import ValueTargets

    mask = action_mask.to(torch.float64)
    adv, returns = _core_algos().compute_gae_advantage_return(
        token_level_rewards=token_rewards.to(torch.float64) * mask,
        values=values.to(torch.float64) * mask,
        response_mask=mask,
        gamma=gamma,
        lam=lam,
    )
    dtype = token_rewards.dtype if token_rewards.dtype.is_floating_point else torch.float32
    return ValueTargets((adv * mask).to(dtype), (returns * mask).to(dtype)), {}


ADVANTAGE_FN.add(PREFIX + "ppo", verl_gae_advantage, critic=True)
ADVANTAGE_FN.add(PREFIX + "gae", verl_gae_advantage, critic=True)


# -- policy losses -----------------------------------------------------------------------------


def _policy_loss(
    fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]],
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str,
    actor: dict[str, Any],
    name: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    old, adv, mask = checked_inputs(logprob, old_logprob, advantages, action_mask, name)
    loss, metrics = fn(
        old,
        logprob,
        adv,
        mask,
        loss_agg_mode,
        config=_actor_config(**actor),
    )
    out = {k.removeprefix("actor/"): float(v) for k, v in metrics.items()}
    out["pg_loss"] = float(loss.detach())
    return loss, out


def _clip_values(
    clip_range: float | None,
    clip_range_low: float | None,
    clip_range_high: float | None,
    low_default: float,
    high_default: float,
) -> dict[str, float]:
    low = next(v for v in (clip_range_low, clip_range, low_default) if v is not None)
    high = next(v for v in (clip_range_high, clip_range, high_default) if v is not None)
    return {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high}


@POLICY_LOSS_FN.register(PREFIX + "ppo")
def verl_ppo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_policy_loss_vanilla` (PPO clip, dual clip below -A c for A < 0).

    verl always applies the dual clip (its default c is 3); with rft's default (clip_ratio_c
    unset) c is infinite here, which is no dual clip, as in rft's ppo.
    """
    actor = _clip_values(clip_range, clip_range_low, clip_range_high, clip_range, clip_range)
    actor["clip_ratio_c"] = float("inf") if clip_ratio_c is None else clip_ratio_c
    return _policy_loss(
        _core_algos().compute_policy_loss_vanilla,
        logprob,
        old_logprob,
        advantages,
        action_mask,
        loss_agg_mode,
        actor,
        PREFIX + "ppo",
    )


@POLICY_LOSS_FN.register(PREFIX + "gspo")
def verl_gspo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_policy_loss_gspo`: the sequence ratio exp(mean_t(logprob - old)) on every
    token, clipped to [1 - low, 1 + high]; ranges default to GSPO's 3e-4 / 4e-4 as in rft."""
    actor = _clip_values(clip_range, clip_range_low, clip_range_high, GSPO_CLIP_LOW, GSPO_CLIP_HIGH)
    return _policy_loss(
        _core_algos().compute_policy_loss_gspo,
        logprob,
        old_logprob,
        advantages,
        action_mask,
        loss_agg_mode,
        actor,
        PREFIX + "gspo",
    )


@POLICY_LOSS_FN.register(PREFIX + "cispo")
def verl_cispo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range_low: float = 1.0,
    clip_range_high: float = 0.28,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_policy_loss_cispo`: L_t = -sg(clip(r_t, 1 - low, 1 + high)) A_t logprob_t.
    (verl has no mask clip: rft's cispo args enable_mask_clip / mask_clip_range_* are not here.)"""
    actor = {
        "clip_ratio": clip_range_low,
        "clip_ratio_low": clip_range_low,
        "clip_ratio_high": clip_range_high,
    }
    return _policy_loss(
        _core_algos().compute_policy_loss_cispo,
        logprob,
        old_logprob,
        advantages,
        action_mask,
        loss_agg_mode,
        actor,
        PREFIX + "cispo",
    )


@POLICY_LOSS_FN.register(PREFIX + "sapo")
def verl_sapo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's `compute_policy_loss_sapo`: L_t = -A_t sigmoid(tau (r_t - 1)) 4 / tau, tau_pos for
    A > 0 and tau_neg otherwise. verl aggregates it seq-mean-token-mean whatever the mode, so
    another loss_agg_mode is refused rather than silently not applied."""
    if loss_agg_mode != "seq-mean-token-mean":
        raise AlgorithmInputError(
            f"loss_agg_mode: verl's sapo aggregates seq-mean-token-mean only, got {loss_agg_mode!r}"
        )
    return _policy_loss(
        _core_algos().compute_policy_loss_sapo,
        logprob,
        old_logprob,
        advantages,
        action_mask,
        loss_agg_mode,
        {"tau_pos": tau_pos, "tau_neg": tau_neg},
        PREFIX + "sapo",
    )
