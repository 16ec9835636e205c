"""A version's files go up while the trainer trains on, on the real stack: with a slow store
(the `checkpoint.upload` point pauses the writer's thread), the trainer trains step N+1 before
version N is announced; the versions are still committed and announced in order, each holding
what it held when it was begun, and the run checker finds the run's record whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.config.connections import StackSettings
from rft.consumers.ops.run_check import RunChecker
from rft.consumers.trainer.trainer import Trainer
from rft.events.models import Metric, WeightVersion
from rft.fault_points import ENV
from tests.integration.test_rft_loop import STEPS, published_run
from tests.integration.test_trainer_resume import run_verb
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration


def test_the_trainer_trains_on_while_a_version_goes_up(
    stack: StackSettings, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # trainer_driven: the explorer never waits, so every step's batch is there before training
    config_path, cfg, plan = published_run(stack, unique, tmp_path, "trainer_driven", 1)
    run_verb("explore", config_path)
    monkeypatch.setenv(ENV, "checkpoint.upload:2")  # each version's upload takes 2 s more

    summary = Trainer(cfg, idle_timeout_s=20.0).run()
    assert summary.steps == STEPS
    assert summary.published_versions == list(range(1, STEPS + 1))

    kafka = cfg.stack.kafka
    announced = [
        e
        for e in read_topic(kafka, plan.topics.weights, unique + "-w")
        if isinstance(e.event, WeightVersion)
    ]
    assert [e.event.version for e in announced] == list(range(1, STEPS + 1))
    trained_at = {
        e.event.step: e.timestamp_ms
        for e in read_topic(kafka, plan.topics.metrics, unique + "-m")
        if isinstance(e.event, Metric) and e.event.component == "trainer"
    }
    # step N+1 trained (its metrics sent) before version N was announced, for every version
    # but the last, which a run's end lands at once
    for env in announced[:-1]:
        assert trained_at[env.event.version + 1] < env.timestamp_ms, env.event.version

    store = plan.checkpoint_store()
    manifests = [store.read_manifest(v) for v in range(1, STEPS + 1)]
    assert [m.parent_version for m in manifests] == list(range(STEPS))
    per_step = cfg.buffer.batch_size * cfg.algorithm.repeat_times
    # each version holds its own step's experiences, not those its successor trained meanwhile
    for env in announced:
        log = env.event.trained_log
        assert log is not None
        assert sum(len(list(r.offsets())) for r in log.trained) == per_step, env.event.version
    positions = [{(o.topic, o.partition): o.offset for o in m.consumed_offsets} for m in manifests]
    for older, newer in zip(positions, positions[1:], strict=False):
        assert all(newer.get(tp, 0) >= offset for tp, offset in older.items())
    report = RunChecker.of_plan(plan).check()
    assert report.ok, report.table()
