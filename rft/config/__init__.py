"""The run config: typed sections with Trinity-RFT key names, bound and checked by `read_config`.

The ground floor: this package imports no other part of rft but `rft.errors`. The checks of the
registered parts a config selects run above it: `rft.catalog.load_config(path, overrides)` returns
an `RftConfig`; its `stack` section holds the Kafka and object-store connection settings
(`rft.config.connections`).
"""

from rft.config.connections import StackSettings
from rft.config.loader import (
    ConfigValidationError,
    ConfigWarning,
    LoadStage,
    Problem,
    read_config,
    read_config_dict,
)
from rft.config.schema import (
    AlgorithmConfig,
    BufferConfig,
    ClusterConfig,
    DataProcessorConfig,
    ExperienceBufferConfig,
    ExperiencePipelineConfig,
    ExplorerConfig,
    ExplorerInputConfig,
    FormatConfig,
    ModelConfig,
    MonitorConfig,
    OperatorConfig,
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
    "DataProcessorConfig",
    "ExperienceBufferConfig",
    "ExperiencePipelineConfig",
    "ExplorerConfig",
    "ExplorerInputConfig",
    "FormatConfig",
    "ModelConfig",
    "MonitorConfig",
    "OperatorConfig",
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
    "LoadStage",
    "read_config",
    "read_config_dict",
]
