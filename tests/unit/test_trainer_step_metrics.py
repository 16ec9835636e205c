"""The trainer's per-step metrics transaction through an outage: Kafka failing it (a stalled
producer given up, a transaction the broker aborted) aborts it and writes it again within the
outage window, as a version's publish does; past the window the OutageError ends the trainer.

The writer here stands in for Kafka's failures only; what is tested is the trainer loop's policy
(`TrainerLoop.emit_step_metrics`), with the real OutageWindow on a fake clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rft.consumers.trainer.loop import TrainerLoop
from rft.errors import OutageError
from rft.events.transport import StuckCallError
from rft.stack.outage_window import OutageWindow


class FailingWriter:
    """Fails the first `failures` commits with StuckCallError; records what it was asked."""

    def __init__(self, failures: int, window: OutageWindow) -> None:
        self.failures = failures
        self.window = window
        self.in_transaction = False
        self.calls: list[str] = []

    def begin(self) -> None:
        self.in_transaction = True
        self.calls.append("begin")

    def commit(self) -> None:
        if self.failures:
            self.failures -= 1
            self.calls.append("commit failed")
            raise StuckCallError("no delivery for 60 s")
        self.in_transaction = False
        self.calls.append("commit")

    def abort(self) -> None:
        self.in_transaction = False
        self.calls.append("abort")


def loop_with(writer: FailingWriter) -> Any:
    emitted: list[tuple[int, dict[str, float]]] = []
    metrics = SimpleNamespace(emit=lambda step, values: emitted.append((step, dict(values))))
    loop = SimpleNamespace(
        step=7, claims=None, clients=SimpleNamespace(writer=writer, metrics=metrics)
    )
    loop.abort_transaction = lambda exc, what: TrainerLoop.abort_transaction(loop, exc, what)  # type: ignore[arg-type]
    loop.emitted = emitted
    return loop


def window(clock: list[float], timeout_s: float) -> OutageWindow:
    return OutageWindow(
        "kafka",
        f"test-{id(clock)}:9",
        timeout_s,
        "stack.kafka.outage_timeout",
        clock=lambda: clock[0],
        wall_clock=lambda: clock[0],
        sleep=lambda s: None,
    )


def test_a_failed_metrics_transaction_is_aborted_and_written_again() -> None:
    clock = [1000.0]
    writer = FailingWriter(2, window(clock, 300))
    loop = loop_with(writer)
    TrainerLoop.emit_step_metrics(loop, {"loss": 0.5})
    assert writer.calls == ["begin", "commit failed", "abort"] * 2 + ["begin", "commit"]
    assert loop.emitted == [(7, {"loss": 0.5})] * 3


def test_past_the_outage_window_the_trainer_stops() -> None:
    clock = [1000.0]
    writer = FailingWriter(10, window(clock, 30))
    loop = loop_with(writer)

    def later(step: int, values: dict[str, float]) -> None:
        clock[0] += 20

    loop.clients.metrics.emit = later
    with pytest.raises(OutageError, match="stack.kafka.outage_timeout"):
        TrainerLoop.emit_step_metrics(loop, {"loss": 0.5})
    assert writer.calls.count("commit failed") == 3
