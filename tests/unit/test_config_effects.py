"""Keys whose effect is decided from the config alone, each shown doing what its fate says:
steps from epochs, the eval workflow default, staleness admission, LR warmup, refusals and notices,
and `stack.local.auto_start`."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.config.connections import KafkaSettings
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.trainer import Trainer, trainer_engine_config
from rft.errors import RftError
from rft.events.transport import kafka_backend
from rft.producers.taskset_reader import load_taskset
from rft.supervisor.run_supervisor import RunSupervisor
from tests.unit.config_samples import MINIMAL


def write(tmp_path: Path, text: str = MINIMAL) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_total_epochs_sets_the_step_count_when_total_steps_is_unset(tmp_path: Path) -> None:
    overrides = ["buffer.explorer_input.taskset.generator_args.num_tasks=10"]
    one = RunPlan(load_config(write(tmp_path), overrides))
    three = RunPlan(load_config(write(tmp_path), [*overrides, "buffer.total_epochs=3"]))
    taskset = three.cfg.buffer.explorer_input.taskset
    assert taskset is not None
    rows = len(load_taskset(taskset).rows)
    # whole batches: a last, partial one could never fill a train batch
    assert one.total_steps == rows // 4
    assert three.total_steps == rows * 3 // 4


def test_eval_tasksets_take_the_eval_workflow_default(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "    default_workflow_type: math_workflow\n",
        "    default_workflow_type: math_workflow\n"
        "    default_eval_workflow_type: simple_workflow\n"
        "    eval_tasksets:\n"
        "      - {name: e, storage_type: generator, path: arithmetic}\n",
    )
    cfg = load_config(write(tmp_path, text))
    assert cfg.buffer.explorer_input.taskset.default_workflow_type == "math_workflow"  # type: ignore[union-attr]
    assert cfg.buffer.explorer_input.eval_tasksets[0].default_workflow_type == "simple_workflow"


def test_max_staleness_decides_what_the_trainer_admits(tmp_path: Path) -> None:
    trainer = Trainer(load_config(write(tmp_path), ["buffer.trainer_input.max_staleness=1"]))
    assert trainer.staleness.accepts(5, 4) and not trainer.staleness.accepts(5, 3)
    unbounded = Trainer(load_config(write(tmp_path)))
    assert unbounded.staleness.accepts(5, 0)


def test_warmup_steps_and_ratio_reach_the_trainer_engine(tmp_path: Path) -> None:
    steps = load_config(write(tmp_path), ["trainer.optim.lr_warmup_steps=3"])
    assert trainer_engine_config(steps, 20, False).warmup_steps == 3
    ratio = load_config(write(tmp_path), ["trainer.optim.lr_warmup_steps_ratio=0.25"])
    assert trainer_engine_config(ratio, 20, False).warmup_steps == 5


def test_more_than_one_node_loads_with_what_happens(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        load_config(write(tmp_path), ["cluster.node_num=2"])
    notes = [str(w.message) for w in record if w.category is ConfigWarning]
    assert any("rft starts processes on this machine only" in n for n in notes)


def test_schema_registry_url_is_refused_until_the_event_plane_uses_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match="does not use a schema registry yet"):
        load_config(write(tmp_path), ["stack.kafka.schema_registry_url=http://127.0.0.1:8081"])


def test_auto_start_false_starts_nothing(tmp_path: Path) -> None:
    root = tmp_path / "stack-root"
    overrides = [
        f"stack.local.root={root}",
        "stack.local.auto_start=false",
        # endpoints that point at "the local stack" of that root, on ports nothing serves
        "stack.local.kafka_port=1",
        "stack.kafka.bootstrap_servers=127.0.0.1:1",
        "stack.local.minio_port=2",
        "stack.object_store.endpoint=127.0.0.1:2",
    ]
    cfg = load_config(write(tmp_path), overrides)
    RunSupervisor(cfg, tmp_path / "run.yaml", []).ensure_stack()
    assert not root.exists()  # with auto_start true, up() would have laid the stack out here


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_kafka_extra_settings_reach_the_client(client: str) -> None:
    # no broker needed: both clients check their settings before connecting
    settings = KafkaSettings(
        bootstrap_servers="127.0.0.1:1", client=client, extra={"no.such.property": "1"}
    )
    with pytest.raises(RftError, match="no.such.property"):
        kafka_backend(settings).producer(None, None).produce("t", b"v")


def test_trainer_and_explorer_names_pick_their_consumer_groups(tmp_path: Path) -> None:
    base = RunPlan(load_config(write(tmp_path)))
    other = RunPlan(
        load_config(write(tmp_path), ["trainer.name=trainer-b", "explorer.name=explorer-b"])
    )
    assert base.trainer_group != other.trainer_group and other.trainer_group.endswith("trainer-b")
    assert other.explorer_group.endswith("explorer-b")


def test_consumers_may_work_longer_than_a_rollout_can_take(tmp_path: Path) -> None:
    default = RunPlan(load_config(write(tmp_path))).consumer_config["max.poll.interval.ms"]
    assert default >= 3600 * 1000  # a slow step or a long eval keeps group membership
    slow = RunPlan(
        load_config(write(tmp_path), ["explorer.max_timeout=3000", "explorer.max_retry_times=2"])
    ).consumer_config["max.poll.interval.ms"]
    assert slow >= 3000 * 3 * 1000  # every try of a rollout fits between two polls


def test_dapo_filters_uniform_groups_unless_turned_off(tmp_path: Path) -> None:
    dapo = Trainer(load_config(write(tmp_path), ["algorithm.algorithm_type=dapo"]))
    assert dapo.sample_strategy_args["filter_groups"] is True
    off = Trainer(
        load_config(
            write(tmp_path),
            ["algorithm.algorithm_type=dapo", "algorithm.sample_strategy_args.filter_groups=false"],
        )
    )
    assert off.sample_strategy_args["filter_groups"] is False
    assert "filter_groups" not in Trainer(load_config(write(tmp_path))).sample_strategy_args
