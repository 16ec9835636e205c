"""The `dpo` policy loss (sigmoid with label smoothing, and IPO) against a float64 reference
written with `math` over plain lists, the `preference` advantage that marks each pair's sides,
and the composed objective passing the reference logprobs through."""

from __future__ import annotations

import math

import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.objective import LossBatch, build_loss
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.algorithms.presets import ALGORITHM_TYPES, resolve_algorithm
from rft.algorithms.tensor_checks import AlgorithmInputError


def reference_dpo(
    logprob: list[list[float]],
    ref: list[list[float]],
    mask: list[list[int]],
    chosen_first: list[bool],
    beta: float,
    eps: float,
    loss_type: str,
) -> tuple[float, float, float]:
    """(loss, mean chosen reward, accuracy) by the formula, one pair at a time."""
    losses, chosen_rewards, right = [], [], 0
    for k, first in enumerate(chosen_first):
        rho = [
            sum((lp - rp) * m for lp, rp, m in zip(logprob[i], ref[i], mask[i], strict=True))
            for i in (2 * k, 2 * k + 1)
        ]
        c, r = (rho[0], rho[1]) if first else (rho[1], rho[0])
        h = c - r
        if loss_type == "sigmoid":

            def log_sigmoid(x: float) -> float:
                return -math.log1p(math.exp(-x)) if x > 0 else x - math.log1p(math.exp(x))

            losses.append(-(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h))
        else:
            losses.append((h - 1 / (2 * beta)) ** 2)
        chosen_rewards.append(beta * c)
        right += h > 0
    n = len(chosen_first)
    return sum(losses) / n, sum(chosen_rewards) / n, right / n


def pair_batch(seed: int, pairs: int = 3, width: int = 5):
    g = torch.Generator().manual_seed(seed)
    rows = 2 * pairs
    logprob = -torch.rand((rows, width), generator=g, dtype=torch.float64) * 3
    ref = -torch.rand((rows, width), generator=g, dtype=torch.float64) * 3
    mask = (torch.rand((rows, width), generator=g) > 0.3).to(torch.float64)
    mask[:, 0] = 1.0  # every row trains at least one token
    chosen_first = [bool(b) for b in (torch.rand(pairs, generator=g) > 0.5)]
    side = torch.tensor(
        [s for first in chosen_first for s in ((1.0, -1.0) if first else (-1.0, 1.0))],
        dtype=torch.float64,
    )
    advantages = side[:, None] * mask
    return logprob, ref, mask, advantages, chosen_first


@pytest.mark.parametrize(
    ("loss_type", "beta", "eps"),
    [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.2), ("ipo", 0.1, 0.0), ("ipo", 2.0, 0.0)],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dpo_loss_matches_the_float64_reference(
    loss_type: str, beta: float, eps: float, seed: int
) -> None:
    logprob, ref, mask, adv, chosen_first = pair_batch(seed)
    fn = POLICY_LOSS_FN.get("dpo")
    loss, metrics = fn(
        logprob,
        None,
        adv,
        mask,
        ref_logprob=ref,
        beta=beta,
        label_smoothing=eps,
        loss_type=loss_type,
    )
    want, chosen_reward, accuracy = reference_dpo(
        logprob.tolist(), ref.tolist(), mask.tolist(), chosen_first, beta, eps, loss_type
    )
    assert loss.dtype == torch.float64
    assert float(loss) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert metrics["rewards/chosen"] == pytest.approx(chosen_reward, rel=1e-12, abs=1e-12)
    assert metrics["rewards/accuracies"] == pytest.approx(accuracy)
    margin = metrics["rewards/chosen"] - metrics["rewards/rejected"]
    assert metrics["rewards/margins"] == pytest.approx(margin, rel=1e-12, abs=1e-12)


def test_the_gradient_raises_the_chosen_and_lowers_the_rejected_response() -> None:
    logprob, ref, mask, adv, chosen_first = pair_batch(5, pairs=2)
    logprob.requires_grad_(True)
    loss, _ = POLICY_LOSS_FN.get("dpo")(logprob, None, adv, mask, ref_logprob=ref)
    loss.backward()
    assert logprob.grad is not None
    for k, first in enumerate(chosen_first):
        chosen, rejected = (2 * k, 2 * k + 1) if first else (2 * k + 1, 2 * k)
        on = mask[chosen] > 0
        assert bool((logprob.grad[chosen][on] < 0).all())  # descent raises its logprob
        assert bool((logprob.grad[rejected][mask[rejected] > 0] > 0).all())
    # untrained tokens get no gradient
    assert bool((logprob.grad[mask == 0] == 0).all())


def test_a_pair_that_is_not_one_chosen_and_one_rejected_is_refused() -> None:
    logprob, ref, mask, adv, _ = pair_batch(3, pairs=2)
    fn = POLICY_LOSS_FN.get("dpo")
    same_side = adv.abs()
    with pytest.raises(AlgorithmInputError, match="rows 0 and 1"):
        fn(logprob, None, same_side, mask, ref_logprob=ref)
    with pytest.raises(AlgorithmInputError, match="micro_batch_size must be even"):
        fn(logprob[:3], None, adv[:3], mask[:3], ref_logprob=ref[:3])
    with pytest.raises(AlgorithmInputError, match="loss_type"):
        fn(logprob, None, adv, mask, ref_logprob=ref, loss_type="hinge-ish")
    with pytest.raises(AlgorithmInputError, match="beta"):
        fn(logprob, None, adv, mask, ref_logprob=ref, beta=0.0)


def test_the_preference_advantage_marks_the_higher_reward_as_chosen() -> None:
    fn = ADVANTAGE_FN.get("preference")
    adv, metrics = fn(torch.tensor([0.0, 1.0, 0.7, 0.2]), torch.tensor([4, 4, 9, 9]))
    assert adv.tolist() == [-1.0, 1.0, 1.0, -1.0]
    assert metrics["pair_count"] == 2.0
    with pytest.raises(AlgorithmInputError, match="equal rewards"):
        fn(torch.tensor([0.5, 0.5]), torch.tensor([0, 0]))
    with pytest.raises(AlgorithmInputError, match="group 3 has 3"):
        fn(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([3, 3, 3]))


def test_the_dpo_objective_reads_the_reference_model() -> None:
    spec = resolve_algorithm({"algorithm_type": "dpo", "policy_loss_fn_args": {"beta": 0.3}})
    assert spec.use_reference and ALGORITHM_TYPES.get("dpo").dataset == "pair"
    loss_fn = build_loss(spec)
    assert loss_fn.needs_reference
    logprob, ref, mask, adv, chosen_first = pair_batch(7)
    loss, metrics = loss_fn(
        logprob, None, LossBatch(action_mask=mask, advantages=adv, ref_logprob=ref)
    )
    want, _, _ = reference_dpo(
        logprob.tolist(), ref.tolist(), mask.tolist(), chosen_first, 0.3, 0.0, "sigmoid"
    )
    assert float(loss) == pytest.approx(want, rel=1e-12)
    assert metrics["loss"] == pytest.approx(want, rel=1e-12)
    with pytest.raises(AlgorithmInputError, match="ref_logprob"):
        loss_fn(logprob, None, LossBatch(action_mask=mask, advantages=adv))
