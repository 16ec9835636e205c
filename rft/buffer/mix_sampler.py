"""MixSampler (`sample_strategy: mix`): every batch mixes rollouts with demonstrations.

Trinity-RFT's mix strategy: of each batch of `train_batch_size` rows, ceil(expert_data_ratio *
train_batch_size) are demonstrations from the auxiliary buffer `sft_dataset_name`
(`buffer.trainer_input.auxiliary_buffers`), the rest whole rollout groups from the experience
topic as in `staleness_control`. Demonstration rows are marked `expert`: the trainer gives them
zero advantage and the SFT loss instead of the RL one (`rft.algorithms.expert_rows`). The
position in the auxiliary buffer is saved with the sampler's state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rft.buffer.group_sampler import GroupSampler, SamplerSetup
from rft.buffer.sampler import BatchRow, SampledBatch
from rft.errors import ConfigError

_ARGS = "algorithm.sample_strategy_args"


class MixSampler(GroupSampler):
    def __init__(
        self,
        setup: SamplerSetup,
        *,
        expert_data_ratio: float = 0.5,
        sft_dataset_name: str = "sft_dataset",
        max_staleness: int | None = None,
        filter_groups: bool = False,
    ) -> None:
        if isinstance(expert_data_ratio, bool) or not 0.0 <= float(expert_data_ratio) <= 1.0:
            raise ConfigError(
                f"{_ARGS}.expert_data_ratio: must be in [0, 1], got {expert_data_ratio!r}"
            )
        source = setup.expert_sources.get(sft_dataset_name)
        if source is None:
            known = ", ".join(sorted(setup.expert_sources)) or "none"
            raise ConfigError(
                f"{_ARGS}.sft_dataset_name: {sft_dataset_name!r} is not an entry of "
                f"buffer.trainer_input.auxiliary_buffers (known: {known})"
            )
        super().__init__(setup, max_staleness=max_staleness, filter_groups=filter_groups)
        self.source = source
        self.expert_per_batch = math.ceil(float(expert_data_ratio) * setup.train_batch_size)
        self.learner_per_batch = setup.train_batch_size - self.expert_per_batch

    def take_batch(self, version: int) -> SampledBatch | None:
        groups = self._choose_groups(version, self.learner_per_batch)
        if groups is None:
            return None
        experts = self.source.take(self.expert_per_batch) if self.expert_per_batch else []
        if experts is None:  # a topic source without enough rows yet: the groups wait
            return None
        rows = self._use(groups) + [BatchRow(e, None, 1, expert=True) for e in experts]
        self.counters.expert_rows += len(experts)
        return SampledBatch(rows, version, self.counters.copy())

    def state(self) -> dict[str, Any]:
        return {**super().state(), "expert": self.source.state()}

    def restore(self, state: Mapping[str, Any]) -> None:
        super().restore(state)
        if state:
            self.source.restore(state.get("expert", {}))
