"""Gradient (activation) checkpointing of a causal LM's decoder layers (`trainer.enable_gradient_checkpointing`).

Each decoder layer (a class the model lists in `_no_split_modules`) keeps only its inputs in the
forward; its activations are recomputed when the backward reaches it. Memory for activations then
grows with one layer's instead of all layers', at the cost of a second forward per layer. It is
torch's composable `checkpoint`, applied per module (so it composes with FSDP2's `fully_shard`,
which must come after it), and unlike transformers' own switch it does not depend on the
model's train/eval mode: rft's trainer runs its forward in eval mode (no dropout).
"""

from __future__ import annotations

from typing import Any

from rft.errors import EngineError

_DONE = "_rft_activation_checkpointed"


def checkpoint_decoder_layers(model: Any) -> int:
    """Checkpoint every decoder layer of `model` (once; a second call changes nothing) and
    return how many layers are checkpointed; EngineError when the model names none."""
    from torch.distributed._composable import checkpoint

    # the classes named by the model, or by a model it wraps (an FSDP root, a peft model)
    layer_classes = {
        name for m in model.modules() for name in (getattr(m, "_no_split_modules", None) or ())
    }
    # fully_shard swaps a module's class for an `FSDP<name>` subclass
    layers = [m for m in model.modules() if type(m).__name__.removeprefix("FSDP") in layer_classes]
    if not layers:
        raise EngineError(
            "trainer.enable_gradient_checkpointing: the model names no decoder layer classes "
            f"(_no_split_modules of {type(model).__name__}), so nothing can be checkpointed"
        )
    for layer in layers:
        if not getattr(layer, _DONE, False):
            checkpoint(layer)
            setattr(layer, _DONE, True)
    return len(layers)
