"""ExplorerSync with an engine whose entry says it cannot load weights: no version is loaded into
it nor waited for, and each chunk's tasks record the oldest version its server said answered.
Weight loading itself is tests/integration/test_explorer_sync.py's; this is the decision."""

from __future__ import annotations

from typing import Any

import pytest

from rft.config.schema import SynchronizerConfig
from rft.consumers.explorer.sync import ExplorerSync, SyncTimeoutError
from rft.synchronizer import build_sync_style


class NoWeightsYet:
    """A weights topic on which nothing was announced: what a follower sees before a trainer."""

    latest = None
    refused: list[int] = []

    def poll(self, timeout_s: float = 0.0) -> None:
        return None

    def wait_for(self, version: int, timeout_s: float) -> int:
        return 0  # the newest version available: none

    def load_newest(self, engine: Any) -> bool:
        raise AssertionError("a version was loaded into an engine that cannot load one")


class ServerAnswers:
    """An engine's version reports as a remote engine makes them."""

    model_version = 0

    def __init__(self, answered: list[int]) -> None:
        self.answered = answered

    def oldest_answering_version(self) -> int | None:
        oldest = min(self.answered, default=None)
        self.answered = []
        return oldest


def _sync(loads_weights: bool) -> ExplorerSync:
    settings = SynchronizerConfig(sync_timeout=0.2, on_sync_timeout="stop")
    style = build_sync_style("trainer_driven", 1, 0, max_head_offpolicyness=0)
    return ExplorerSync(
        settings,
        style,
        NoWeightsYet(),  # type: ignore[arg-type]
        explorer_id="e",
        control_topic="c",
        weights_topic="w",
        loads_weights=loads_weights,
    )


def test_a_remote_engine_is_not_held_for_versions_and_records_what_answered() -> None:
    engine: Any = ServerAnswers([7])  # an answer before the chunk: not these tasks'
    with pytest.raises(SyncTimeoutError, match="step 3 needs weight version 2"):
        _sync(loads_weights=True).before_step(3, engine, writer=None)  # type: ignore[arg-type]
    sync = _sync(loads_weights=False)
    step = sync.before_step(3, engine, writer=None)  # type: ignore[arg-type]
    assert step.required == 2 and sync.counters.loads == 0
    sync.between_rollouts(engine, ["a", "b"])
    engine.answered = [5, 4, 5]  # the chunk's calls, as the server reported them
    sync.after_rollouts(engine, ["a", "b"])
    assert step.task_versions == {"a": 4, "b": 4}
    sync.between_rollouts(engine, ["c"])
    sync.after_rollouts(engine, ["c"])  # no call answered: nothing recorded
    assert "c" not in step.task_versions
