"""Gradient (activation) checkpointing of a causal LM's decoder layers (`trainer.enable_gradient_checkpointing`).

Each decoder layer (a class the model lists in `_no_split_modules`) keeps only its inputs in the
forward; its activations are recomputed when the backward reaches it. Memory for activations then
grows with one layer's instead of all layers', at the cost of a second forward per layer. Unlike
transformers' own switch it does not depend on the model's train/eval mode: rft's trainer runs its
forward in eval mode (no dropout). It is applied before FSDP2's `fully_shard`, which keeps the
layer's forward and adds its hooks around it.

Why torch's *reentrant* checkpoint where it can: the first forward then runs without autograd
(nothing recorded, nothing saved but the inputs), where the non-reentrant one records the whole
graph and passes every saved tensor through a pack and an unpack hook. At the loop's sizes the
trainer's step is bound by its host (the GPU sat idle about 40% of an fsdp2 step on an H100: docs/
benchmarks.md, the ninth lease), and the hooks are host work: on a 28-layer model too thin for its
arithmetic to count, one step of 16 micro-batches took 1.80-1.84 s of host time with the non-reentrant
checkpoint against 1.28-1.29 s with the reentrant one (torch engine; fsdp2 2.79-2.99 against
1.92-2.03 s; `bench/step_host_work.py`, docs/trainer-memory.md). The reentrant checkpoint gives a layer's weights no gradient when its
input needs none (the embeddings frozen, as under LoRA), so a call whose input does not require a
gradient, or one with a keyword argument that does or with a key-value cache (the engines pass
none; the recomputation would write to it again), takes the non-reentrant checkpoint instead.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from rft.errors import EngineError

_DONE = "_rft_activation_checkpointed"


def checkpoint_decoder_layers(model: Any) -> int:
    """Checkpoint every decoder layer of `model` (once; a second call changes nothing) and
    return how many layers are checkpointed; EngineError when the model names none."""
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
            # bound to the layer, so that a deep copy of the model binds it to the copy
            layer.forward = types.MethodType(_checkpointed_forward, layer)
            setattr(layer, _DONE, True)
    return len(layers)


def _checkpointed_forward(layer: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
    """The layer's own forward (its class's), under a checkpoint when autograd records."""
    import torch
    from torch.utils.checkpoint import checkpoint

    forward = functools.partial(type(layer).forward, layer, **kwargs)
    if not torch.is_grad_enabled():
        return forward(hidden_states, *args)
    # reentrant needs an input that requires a gradient to carry the weights' gradients back,
    # and gives none to a keyword argument (the masks and rotary tables: none needs one); its
    # recomputation would write a key-value cache (the engines pass none) a second time
    reentrant = (
        _needs_grad(hidden_states)
        and not any(map(_needs_grad, kwargs.values()))
        and kwargs.get("past_key_values") is None
    )
    return checkpoint(forward, hidden_states, *args, use_reentrant=reentrant)


def _needs_grad(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return any(map(_needs_grad, value))
    return bool(getattr(value, "requires_grad", False))
