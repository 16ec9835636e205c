"""RL algorithms as pure tensor math, and the registries that name them.

Registries (Trinity-RFT key names): ADVANTAGE_FN, POLICY_LOSS_FN, KL_FN, ENTROPY_LOSS_FN,
ALGORITHM_TYPES, LOSS_AGG_MODES. The trainer uses `resolve_algorithm`, `compute_advantages` and
`build_loss`. Importing `rft.registry` alone does not import torch.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "ADVANTAGE_FN": "rft.algorithms.advantages",
    "broadcast_advantages": "rft.algorithms.advantages",
    "group_stats": "rft.algorithms.advantages",
    "LOSS_AGG_MODES": "rft.algorithms.aggregation",
    "aggregate_loss": "rft.algorithms.aggregation",
    "masked_mean": "rft.algorithms.aggregation",
    "ENTROPY_LOSS_FN": "rft.algorithms.entropy",
    "KL_ESTIMATORS": "rft.algorithms.kl",
    "KL_FN": "rft.algorithms.kl",
    "apply_kl_penalty": "rft.algorithms.kl",
    "kl_estimate": "rft.algorithms.kl",
    "register_kl_estimator": "rft.algorithms.kl",
    "entropy_from_logits": "rft.algorithms.logits",
    "token_logprobs": "rft.algorithms.logits",
    "AlgorithmLoss": "rft.algorithms.objective",
    "LossBatch": "rft.algorithms.objective",
    "build_loss": "rft.algorithms.objective",
    "compute_advantages": "rft.algorithms.objective",
    "POLICY_LOSS_FN": "rft.algorithms.policy_losses",
    "ALGORITHM_TYPES": "rft.algorithms.presets",
    "AlgorithmSpec": "rft.algorithms.presets",
    "resolve_algorithm": "rft.algorithms.presets",
    "Registry": "rft.registry",
    "AlgorithmInputError": "rft.algorithms.tensor_checks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy so that workflows/rewards can import the Registry class without loading torch.
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'rft.algorithms' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
