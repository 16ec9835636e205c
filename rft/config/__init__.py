"""The run config: typed sections with Trinity-RFT key names, loaded and checked by `load_config`.

`load_config(path, overrides)` returns an `RftConfig`; its `stack` section holds the Kafka and
object-store connection settings (`rft.config.connections`).
"""

from rft.config.connections import StackSettings
from rft.config.loader import (
    ConfigValidationError,
    ConfigWarning,
    Problem,
    config_from_dict,
    load_config,
)
from rft.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    ExperienceBufferConfig,
    ExplorerConfig,
    ExplorerInputConfig,
    FormatConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    ReplayBufferConfig,
    RftConfig,
    RolloutArgs,
    RolloutModelConfig,
    SynchronizerConfig,
    TasksetConfig,
    TrainerConfig,
    TrainerInputConfig,
)

__all__ = [
    "AlgorithmConfig",
    "BufferConfig",
    "ClusterConfig",
    "ConfigValidationError",
    "ConfigWarning",
    "ExperienceBufferConfig",
    "ExplorerConfig",
    "ExplorerInputConfig",
    "FormatConfig",
    "ModelConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "Problem",
    "ReplayBufferConfig",
    "RftConfig",
    "RolloutArgs",
    "RolloutModelConfig",
    "StackSettings",
    "SynchronizerConfig",
    "TasksetConfig",
    "TrainerConfig",
    "TrainerInputConfig",
    "config_from_dict",
    "load_config",
]
