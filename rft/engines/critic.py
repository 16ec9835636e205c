"""The critic of PPO: a value model trained beside the policy, with its own optimizer.

`ValueModel` is a causal LM's decoder (the critic model, `model.critic_model_path`, by default a
second copy of the policy's base model) with a linear value head on its last hidden state:
V[b, j] is the value of the state before response token j, read at the same position whose
logits give that token's logprob. The LM head is not kept. The head starts at zero, so the
first values are 0 and the first advantages are the plain returns.

`Critic` owns the value model, its AdamW (`CriticSettings`, from the `critic` config section) and its
step count. The trainer engine (`rft.engines.trainer`) asks it for values before a step and
runs its update on the same micro-batches; the checkpointer saves and restores its weights and
optimizer state beside the policy's.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from rft.algorithms.aggregation import LOSS_AGG_MODES
from rft.engines.state_snapshot import adamw_moment_sizes, cpu_snapshot, reserve_pinned
from rft.errors import ConfigError, EngineError


@dataclass(frozen=True)
class CriticSettings:
    """The critic's optimizer and loss (the `critic` config section).

    cliprange_value: how far a value may move from the one the advantages used before the
    clipped value loss stops rewarding it (`rft.algorithms.value_loss.clipped_value_loss`).
    """

    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    cliprange_value: float = 0.5
    loss_agg_mode: str = "token-mean"

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"critic.optim.lr: must be > 0, got {self.lr!r}")
        if not self.cliprange_value > 0:
            raise ConfigError(f"critic.cliprange_value: must be > 0, got {self.cliprange_value!r}")
        LOSS_AGG_MODES.get(self.loss_agg_mode, key="critic.loss_agg_mode")


class ValueModel(torch.nn.Module):
    """A causal LM's decoder with a value head: values [b, width] of the response positions."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        get_decoder = getattr(lm, "get_decoder", None)
        decoder = get_decoder() if get_decoder is not None else None
        if decoder is None or decoder is lm:
            raise EngineError(
                f"model.critic_model_path: {type(lm).__name__} has no separate decoder to put a "
                "value head on"
            )
        hidden = int(lm.config.hidden_size)
        param = next(decoder.parameters())
        self.decoder = decoder
        self.value_head = torch.nn.Linear(hidden, 1, device=param.device, dtype=param.dtype)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int, width: int
    ) -> torch.Tensor:
        """Values of positions start .. start + width - 1 (the response's tokens' states)."""
        # positions follow the mask, as in rft.engines.logprobs.token_logprobs
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            use_cache=False,
        ).last_hidden_state[:, start : start + width]
        values: torch.Tensor = self.value_head(hidden).squeeze(-1)
        return values


class Critic:
    """A value model and its AdamW, on the device the value model is on."""

    def __init__(self, model: ValueModel, config: CriticSettings) -> None:
        self.model = model
        self.config = config
        self.model.eval()  # no dropout, as the policy's forward
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self._params,
            lr=config.lr,
            betas=config.betas,
            eps=config.eps,
            weight_decay=config.weight_decay,
        )
        self.step = 0

    @classmethod
    def of_lm(cls, lm: Any, config: CriticSettings) -> Critic:
        """A critic whose value model is `lm`'s decoder (the LM's head is dropped)."""
        return cls(ValueModel(lm), config)

    def apply_gradients(self) -> tuple[float, bool]:
        """Clip and step AdamW, unless the gradient norm is not finite: (norm, skipped)."""
        clip = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(self._params, clip))
        skipped = not math.isfinite(norm)
        if skipped:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
        self.step += 1
        return norm, skipped

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The value model's weights (decoder and head) on the CPU, each storage once: a copy of
        their own, which the checkpoint writer uploads while training goes on."""
        state = self.model.state_dict()
        return {name: t.detach().to("cpu", copy=True) for name, t in state.items()}

    def load_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy `tensors` (every name of `state_dict`) into the value model in place."""
        own = self.model.state_dict()
        missing = sorted(set(own) - set(tensors))
        unexpected = sorted(set(tensors) - set(own))
        if missing or unexpected:
            raise EngineError(
                f"critic weights do not match the value model: missing {missing[:3]}, "
                f"unexpected {unexpected[:3]}"
            )
        with torch.no_grad():
            for name, tensor in own.items():
                tensor.copy_(tensors[name].to(device=tensor.device, dtype=tensor.dtype))

    def training_state(self) -> dict[str, Any]:
        """AdamW moments and the critic's step, for an exact resume: a CPU copy that the next
        step does not change."""
        return cpu_snapshot({"optimizer": self.optimizer.state_dict(), "step": self.step})

    def reserve_state_copies(self) -> None:
        """On a GPU, pinned blocks for its AdamW moments set aside in the background
        (`TrainerEngine.reserve_version_copies`); nothing on the CPU."""
        if self._params[0].device.type == "cuda":
            reserve_pinned(adamw_moment_sizes(self._params))

    def restore_training_state(self, state: dict[str, Any], source: str) -> None:
        """Continue from what `training_state()` returned; EngineError naming `source`."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise EngineError(f"{source}: cannot load the critic's optimizer state: {exc}") from exc
