"""Direct preference optimisation: the `dpo` policy loss and the `preference` advantage fn that
marks which response of a pair is the chosen one.

A preference pair is a rollout group of two experiences with the same prompt: the one with the
higher reward is chosen, the other rejected (a dataset pair is published with rewards 1 and 0;
a pair built from a run's rollouts by `rft replay pairs` keeps their rewards). The `preference`
advantage gives the chosen row +1 and the rejected row -1, so the loss knows each row's side
without a field of its own on the log. Rows of a pair are adjacent in the batch (a group is
trained whole, in arrival order; micro-batches hold an even number of rows, checked at load).

Trinity-RFT's `dpo` policy loss takes `beta` and `label_smoothing`; `loss_type` adds IPO.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rft.algorithms.aggregation import token_inputs
from rft.algorithms.tensor_checks import AlgorithmInputError, ndim_error, shape_error

LOSS_TYPES = ("sigmoid", "ipo")


def preference_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """+1 for the chosen (higher-reward) row of each pair, -1 for the rejected one.

    Every group must hold exactly two rows with different rewards; any other group raises
    AlgorithmInputError naming the group's rows (a pair topic holds only such groups).
    """
    if rewards.dim() != 1:
        raise ndim_error("rewards", rewards, 1)
    if group_index.shape != rewards.shape:
        raise shape_error("group_index", rewards.shape, group_index.shape)
    r = rewards.to(torch.float64)
    adv = torch.zeros_like(r)
    for g in torch.unique(group_index).tolist():
        rows = (group_index == g).nonzero().flatten().tolist()
        if len(rows) != 2:
            raise AlgorithmInputError(
                f"advantage_fn 'preference': a preference pair is a group of 2 experiences, "
                f"group {g} has {len(rows)} (batch rows {rows})"
            )
        a, b = rows
        if r[a] == r[b]:
            raise AlgorithmInputError(
                f"advantage_fn 'preference': the pair at batch rows {rows} has equal rewards "
                f"({float(r[a])}), so neither response is the chosen one"
            )
        chosen, rejected = (a, b) if r[a] > r[b] else (b, a)
        adv[chosen], adv[rejected] = 1.0, -1.0
    pairs = adv.numel() // 2
    return adv.to(torch.float32), {"pair_count": float(pairs)}


def dpo_loss(
    logprob: torch.Tensor,
    old_logprob: torch.Tensor | None,
    advantages: torch.Tensor | None,
    action_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    ref_logprob: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: str = "sigmoid",
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO over the pairs of a micro-batch: rows 2k and 2k + 1 are one pair, the row with the
    positive advantage (`preference`) chosen (c), the other rejected (r).

    Per row, the log-ratio to the reference summed over the trained tokens:
        rho = sum_t mask_t (logprob_t - ref_logprob_t)
    and per pair h = rho_c - rho_r. The losses (mean over the pairs):
        sigmoid: -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)   (eps = label_smoothing,
                 conservative DPO: eps is the share of pairs assumed mislabelled)
        ipo:     (h - 1 / (2 beta))^2
    Metrics: the implicit rewards beta rho of the chosen and rejected rows (rewards/chosen,
    rewards/rejected, their means), rewards/margins = mean beta h, rewards/accuracies = share of
    pairs with h > 0, and dpo_loss. `old_logprob` and `loss_agg_mode` are not read: DPO's terms
    are sums per sequence and one per pair.
    """
    if loss_type not in LOSS_TYPES:
        raise AlgorithmInputError(
            f"policy_loss_fn_args.loss_type: {loss_type!r} is not one of {LOSS_TYPES}"
        )
    if not beta > 0:
        raise AlgorithmInputError(f"policy_loss_fn_args.beta: must be > 0, got {beta!r}")
    if not 0 <= label_smoothing < 0.5:
        raise AlgorithmInputError(
            f"policy_loss_fn_args.label_smoothing: must be in [0, 0.5), got {label_smoothing!r}"
        )
    if advantages is None or ref_logprob is None:
        raise AlgorithmInputError(
            "policy_loss_fn 'dpo' needs the reference logprobs and the `preference` advantages"
        )
    m = token_inputs(
        "logprob", logprob, action_mask, ref_logprob=ref_logprob, advantages=advantages
    )
    rows = logprob.shape[0]
    if rows % 2:
        raise AlgorithmInputError(
            f"policy_loss_fn 'dpo': a micro-batch of {rows} rows splits a pair; "
            "trainer.micro_batch_size must be even"
        )
    diff = logprob - ref_logprob.to(logprob.dtype)
    rho = torch.where(m > 0, diff * m, torch.zeros_like(diff)).sum(dim=-1)
    # the row's side: the sign of its advantage on any trained token
    side = torch.where(m > 0, advantages.to(logprob.dtype), torch.zeros_like(diff)).sum(dim=-1)
    side = side.sign().reshape(-1, 2)
    if not bool(((side[:, 0] * side[:, 1]) == -1).all()):
        bad = int((side[:, 0] * side[:, 1] != -1).nonzero()[0])
        raise AlgorithmInputError(
            f"policy_loss_fn 'dpo': rows {2 * bad} and {2 * bad + 1} of the micro-batch are not "
            "one chosen and one rejected response (a pair's rows must be adjacent; use "
            "advantage_fn preference)"
        )
    pair = rho.reshape(-1, 2)
    first_chosen = side[:, 0] > 0
    chosen = torch.where(first_chosen, pair[:, 0], pair[:, 1])
    rejected = torch.where(first_chosen, pair[:, 1], pair[:, 0])
    h = chosen - rejected
    if loss_type == "sigmoid":
        eps = label_smoothing
        per_pair = -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)
    else:
        per_pair = (h - 1.0 / (2.0 * beta)) ** 2
    loss = per_pair.mean()
    with torch.no_grad():
        chosen_reward, rejected_reward = beta * chosen, beta * rejected
        metrics = {
            "dpo_loss": float(loss),
            "rewards/chosen": float(chosen_reward.mean()),
            "rewards/rejected": float(rejected_reward.mean()),
            "rewards/margins": float((chosen_reward - rejected_reward).mean()),
            "rewards/accuracies": float((h > 0).to(torch.float64).mean()),
        }
    return loss, metrics


def pairing_issues(cfg: Any) -> list[tuple[str, str]]:
    """The `dpo` entry's load-time check, as (config key, problem): a loss over adjacent pairs
    of a chosen and a rejected response needs micro-batches and batches of whole pairs."""
    return [
        (
            where,
            f"{size}: policy_loss_fn 'dpo' trains pairs of a chosen and a rejected response "
            "(two experiences each); use an even number",
        )
        for where, size in (
            ("trainer.micro_batch_size", cfg.trainer.micro_batch_size),
            ("buffer.train_batch_size", cfg.buffer.train_batch_size),
        )
        if size is not None and size % 2
    ]
