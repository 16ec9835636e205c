"""A multi-turn experience's environment tokens are run through the model but never trained.

Rows are built as the trainer builds them (`train_batch_of` over Experience events whose
action_mask has holes between model turns); the torch trainer engine trains a tiny float64 model
with the composed GRPO objective (policy loss, KL loss against a reference, entropy bonus). The
gradient reaching each position's token logprob and entropy (and so its logits: a position's
logits feed only its own logprob and entropy) is captured: it is exactly 0 on every mask-0 token.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from rft.algorithms.objective import Advantages, AlgorithmLoss, LossBatch
from rft.algorithms.presets import ALGORITHM_TYPES
from rft.buffer.sampler import BatchRow
from rft.consumers.trainer.train_step import train_batch_of
from rft.engines.models import ModelSpec, load_model
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.events.models import Experience

# per response: (token ids, action mask); 0s are environment/tool tokens between model turns
RESPONSES = [
    ([11, 12, 13, 14, 15, 16, 17, 18], [1, 1, 0, 0, 0, 1, 1, 1]),
    ([21, 22, 23, 24, 25, 26], [1, 0, 0, 1, 0, 1]),
    ([31, 32, 33, 34, 35], [1, 1, 1, 1, 1]),
    ([41, 42, 43, 44, 45, 46, 47], [0, 0, 1, 1, 0, 0, 1]),
]


def _experiences(hole_logprob: float) -> list[Experience]:
    out = []
    for i, (ids, mask) in enumerate(RESPONSES):
        m = np.array(mask, dtype=bool)
        # the model's tokens carry the engine's logprobs; the environment's whatever the explorer
        # wrote there (0.0 today): `hole_logprob` shows it does not matter
        logprobs = np.where(m, -1.0 - 0.1 * np.arange(len(ids)), hole_logprob).astype(np.float32)
        out.append(
            Experience(
                experience_id=f"t/{i}",
                task_id="t",
                group_id="t",
                group_size=len(RESPONSES),
                explorer_id="e",
                model_version=0,
                prompt_ids=np.array([5, 6, 7], dtype=np.int32),
                response_ids=np.array(ids, dtype=np.int32),
                logprobs=logprobs,
                action_mask=m,
                reward=float(i % 2),
            )
        )
    return out


def _spec():
    return replace(
        ALGORITHM_TYPES.get("grpo"),
        kl_loss_fn="k3",
        kl_loss_fn_args={"kl_coef": 0.05},
        entropy_loss_fn="default",
        entropy_loss_fn_args={"entropy_coef": 0.01},
    )


class GradientProbe:
    """The algorithm's loss, recording the gradient that reaches logprob and entropy."""

    def __init__(self, loss: AlgorithmLoss) -> None:
        self.loss = loss
        self.grads: dict[str, torch.Tensor] = {}
        self.mask: torch.Tensor | None = None

    def __call__(self, logprob: torch.Tensor, entropy: torch.Tensor | None, batch: LossBatch):
        assert entropy is not None
        logprob.register_hook(lambda g: self.grads.__setitem__("logprob", g.detach().clone()))
        entropy.register_hook(lambda g: self.grads.__setitem__("entropy", g.detach().clone()))
        self.mask = batch.action_mask.detach().clone()
        return self.loss(logprob, entropy, batch)


def _engine() -> TorchTrainerEngine:
    model, tok = load_model(ModelSpec("tiny", seed=4, dtype="float64"))
    config = TorchTrainerConfig(lr=1e-3, micro_batch_size=len(RESPONSES), grad_clip=0.0)
    return TorchTrainerEngine(model, config, tokenizer=tok, ref_model=None)


def test_train_batch_of_keeps_the_holed_masks_and_counts_model_tokens() -> None:
    exps = _experiences(0.0)
    batch = train_batch_of([BatchRow(e, None) for e in exps])
    for (_, mask), got in zip(RESPONSES, batch.action_mask, strict=True):
        assert list(np.asarray(got)) == mask
    assert batch.rewards is not None
    # length shaping reads the model's tokens, not the environment's
    assert batch.rewards.response_lengths.tolist() == [float(sum(m)) for _, m in RESPONSES]


def test_masked_positions_get_no_gradient_through_the_engine() -> None:
    spec = _spec()
    probe = GradientProbe(AlgorithmLoss(spec))
    engine = _engine()
    engine.ref_model = load_model(ModelSpec("tiny", seed=5, dtype="float64"))[0].eval()
    batch = train_batch_of([BatchRow(e, None) for e in _experiences(0.0)])
    metrics = engine.train_step(batch, probe, Advantages(spec))
    assert metrics["grad_norm"] > 0
    assert probe.mask is not None
    holes = probe.mask == 0
    trained = probe.mask == 1
    for name in ("logprob", "entropy"):
        g = probe.grads[name]
        assert torch.all(g[holes] == 0), name
        # every trained token of a row with a nonzero advantage is pushed
        assert torch.count_nonzero(g[trained]) > 0, name
    # holes inside the response, not only padding after it, were among the zero-gradient ones
    assert int(holes[:, : max(len(r) for r, _ in RESPONSES)].sum()) >= 7


@pytest.mark.parametrize("hole_logprob", [-30.0, 5.0])
def test_what_the_explorer_wrote_at_holes_does_not_change_the_update(hole_logprob: float) -> None:
    spec = _spec()
    updated = []
    for value in (0.0, hole_logprob):
        engine = _engine()
        engine.ref_model = load_model(ModelSpec("tiny", seed=5, dtype="float64"))[0].eval()
        batch = train_batch_of([BatchRow(e, None) for e in _experiences(value)])
        engine.train_step(batch, AlgorithmLoss(spec), Advantages(spec))
        updated.append([p.detach().clone() for p in engine.model.parameters()])
    first, second = updated
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
