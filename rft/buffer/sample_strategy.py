"""Sample strategies (`algorithm.sample_strategy`, the SAMPLE_STRATEGIES registry): one class each.

Every entry is constructed as `cls(setup, **sample_strategy_args)` (`setup`: a SamplerSetup) and
follows the Sampler protocol (`rft.buffer.sampler`). Trinity-RFT's names:
- `default`: whole groups, FIFO by arrival (or by priority with the replay buffer);
- `staleness_control`: the same, dropping groups staler than `max_staleness` when their batch
  forms (Trinity's `sample_strategy_args.max_staleness`; rft's `buffer.trainer_input.max_staleness`
  is an alias, and set alone with `default` it selects this strategy);
- `mix` (`rft.buffer.mix_sampler`): a share `expert_data_ratio` of every batch from the auxiliary
  buffer `sft_dataset_name`, trained with the SFT loss.
Each also takes `filter_groups` (DAPO's dynamic sampling: groups whose rewards are all equal are
filtered out and counted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rft.buffer.group_sampler import GroupSampler, SamplerSetup
from rft.buffer.mix_sampler import MixSampler
from rft.buffer.sampler import Sampler
from rft.config.binding import Issue
from rft.errors import ConfigError
from rft.registry import Registry

# an entry's own check is given the config and the strategy's args (sampler_choice's)
SAMPLE_STRATEGIES: Registry[Callable[..., Sampler]] = Registry("algorithm.sample_strategy")


def mix_issues(cfg: Any, args: Mapping[str, Any]) -> list[Issue]:
    """`mix` reads its demonstrations from a named auxiliary buffer, with a ratio in [0, 1]."""
    issues = []
    name = args.get("sft_dataset_name", "sft_dataset")
    buffers = cfg.buffer.trainer_input.auxiliary_buffers
    if name not in buffers:
        known = ", ".join(sorted(buffers)) or "none"
        issues.append(
            Issue(
                "algorithm.sample_strategy_args.sft_dataset_name",
                f"sample_strategy mix reads demonstrations from buffer.trainer_input."
                f"auxiliary_buffers.{name}, which is not set (entries: {known})",
            )
        )
    ratio = args.get("expert_data_ratio", 0.5)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
        issues.append(
            Issue(
                "algorithm.sample_strategy_args.expert_data_ratio",
                f"must be a number in [0, 1], got {ratio!r}",
            )
        )
    return issues


SAMPLE_STRATEGIES.register("mix", check=mix_issues)(MixSampler)


@SAMPLE_STRATEGIES.register("default")
class DefaultSampler(GroupSampler):
    """Whole groups in pool order; every experience is trained whatever its age."""

    def __init__(self, setup: SamplerSetup, *, filter_groups: bool = False) -> None:
        super().__init__(setup, filter_groups=filter_groups)


@SAMPLE_STRATEGIES.register("staleness_control")
class StalenessControlSampler(GroupSampler):
    """Whole groups in pool order, none staler than `max_staleness` versions when trained
    (None: no bound, Trinity's default)."""

    def __init__(
        self, setup: SamplerSetup, *, max_staleness: int | None = None, filter_groups: bool = False
    ) -> None:
        if max_staleness is not None and (isinstance(max_staleness, bool) or max_staleness < 0):
            raise ConfigError(
                f"algorithm.sample_strategy_args.max_staleness: must be an integer >= 0, got "
                f"{max_staleness!r}"
            )
        super().__init__(setup, max_staleness=max_staleness, filter_groups=filter_groups)


def sampler_choice(
    strategy: str, args: Mapping[str, Any], alias_max_staleness: int | None
) -> tuple[str, dict[str, Any]]:
    """The strategy and args a config selects, with `buffer.trainer_input.max_staleness` folded
    in: it selects staleness_control over default, and fills max_staleness where it is unset."""
    args = dict(args)
    if alias_max_staleness is None:
        return strategy, args
    if strategy == "default":
        strategy = "staleness_control"
    if strategy in ("staleness_control", "mix") and args.get("max_staleness") is None:
        args["max_staleness"] = alias_max_staleness
    return strategy, args


def build_sampler(strategy: str, args: Mapping[str, Any], setup: SamplerSetup) -> Sampler:
    """The registered strategy `strategy` with its args."""
    return SAMPLE_STRATEGIES.get(strategy)(setup, **args)
