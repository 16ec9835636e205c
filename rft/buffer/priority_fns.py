"""Replay priorities (`replay_buffer.priority_fn`, the PRIORITY_FNS registry, Trinity-RFT's names).

Signature of every entry: `fn(model_version, use_count, noise, **priority_fn_args) -> (priority,
keep)`. `model_version` is the version that generated the rollout group, `use_count` how many
times it has been trained so far (0 when it arrives), `noise` one standard-normal draw the replay
buffer supplies (seeded by the group and its use count, so a restarted trainer draws the same).
The buffer trains the highest priority first and evicts the lowest when full; `keep` False means
the group is not put back for reuse after this use (or not admitted at all when it arrives).
The functions are pure: same inputs, same outputs.
"""

from __future__ import annotations

from collections.abc import Callable

from rft.errors import ConfigError
from rft.registry import Registry

PriorityFn = Callable[..., tuple[float, bool]]
PRIORITY_FNS: Registry[PriorityFn] = Registry("replay_buffer.priority_fn")


@PRIORITY_FNS.register("linear_decay")
def linear_decay(
    model_version: int, use_count: int, noise: float, decay: float = 2.0
) -> tuple[float, bool]:
    """priority = model_version - decay * use_count; always kept for reuse.

    Newer rollouts come first, and each use pushes a group `decay` versions back.
    """
    return float(model_version) - float(decay) * float(use_count), True


@PRIORITY_FNS.register("linear_decay_use_count_control_randomization")
def linear_decay_use_count_control_randomization(
    model_version: int,
    use_count: int,
    noise: float,
    decay: float = 2.0,
    use_count_limit: int = 3,
    sigma: float = 0.0,
) -> tuple[float, bool]:
    """priority = model_version - decay * use_count + sigma * noise;
    kept while use_count < use_count_limit (a limit <= 0 keeps it always).

    So a group is trained at most `use_count_limit` times, and `sigma` > 0 shuffles groups whose
    linear priorities are close.
    """
    if sigma < 0:
        raise ConfigError(f"replay_buffer.priority_fn_args.sigma: must be >= 0, got {sigma!r}")
    priority = float(model_version) - float(decay) * float(use_count)
    if sigma > 0:
        priority += float(sigma) * float(noise)
    keep = use_count < use_count_limit if use_count_limit > 0 else True
    return priority, keep


# Trinity-RFT's newer code registers the same function under this shorter name
PRIORITY_FNS.add("decay_limit_randomization", linear_decay_use_count_control_randomization)
