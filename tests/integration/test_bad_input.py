"""Bad input on every topic the explorer and the trainer read, and in the checkpoints they load.

`test_poison_on_every_topic_is_parked_and_the_loop_completes` runs the loop as a user runs it,
two `rft run` processes (mode explore and mode train, each with its metric follower), after
corrupt and unknown-schema records were written at the start of `tasks`, `eval-tasks`,
`experiences`, `weights`, `control` and `metrics`. Every one of them must be parked in
`dead-letter` with its topic, partition and offset, the warning must name the same, and both
processes must finish their steps with nothing lost.

`test_truncated_and_flipped_checkpoints_are_refused_and_the_previous_version_kept` feeds an
explorer's weight follower a verified version, then one whose file was truncated and one with a
flipped byte: both are refused naming the version and the file, and the engine keeps serving the
verified version's weights.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import save_file

from rft.buffer.expert_source import EXPERT_SOURCES, ExpertContext
from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.config.schema import AuxiliaryBufferConfig
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.consumers.run_plan import RunPlan
from rft.engines.models import ModelSpec, build_byte_tokenizer
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.errors import RecordTooLargeError
from rft.events.codec import MAGIC, EventCodec
from rft.events.models import DeadLetter, Experience, Metric, Task, WeightVersion
from rft.events.reader import EventReader
from rft.events.topics import TopicNames, ensure_topics
from rft.events.transport import TopicSpec, kafka_backend
from rft.events.writer import EventWriter
from rft.producers.task_publisher import (
    TaskPublisher,
    has_committed_tasks,
    load_run_tasksets,
    publish_tasksets,
)
from rft.rewards import REWARD_FUNCTIONS
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import S3ObjectStore
from tests.integration.test_rft_loop import read_all, run_config
from tests.integration.test_weight_follower import announce
from tests.topic_log import read_topic
from tests.unit.experience_log import experience

pytestmark = pytest.mark.integration

STEPS = 3
UNKNOWN_FINGERPRINT = bytes.fromhex("0123456789abcdef")


def poison_for(codec: EventCodec) -> dict[str, list[tuple[bytes, str]]]:
    """Per topic suffix, the bad records written at its start and the error each must get."""
    metric = codec.encode(Metric("c", "r", 1, {"x": 1.0}))
    experience = codec.encode(
        Experience(
            experience_id="e",
            task_id="t",
            group_id="g",
            group_size=1,
            explorer_id="x",
            model_version=0,
            prompt_ids=[1, 2],
            response_ids=[3],
            logprobs=[-0.5],
        )
    )
    unknown = MAGIC + UNKNOWN_FINGERPRINT + metric[10:]
    garbage = b'{"task_id": "not avro"}'
    return {
        "tasks": [(garbage, "CorruptEventError"), (unknown, "UnknownSchemaError")],
        "eval-tasks": [(garbage, "CorruptEventError")],
        "experiences": [(experience[:-3], "TruncatedEventError"), (unknown, "UnknownSchemaError")],
        "weights": [(garbage, "CorruptEventError"), (metric + b"\x00", "CorruptEventError")],
        "control": [(unknown, "UnknownSchemaError")],
        "metrics": [(garbage, "CorruptEventError")],
    }


def read_past_poison(cfg: Any, topic: str, unique: str) -> list[Any]:
    """Every event of `topic`, the poison parked in a scratch topic of this test's own."""
    scratch = f"{unique}.scratch-dead-letter"
    got = read_topic(cfg.stack.kafka, topic, f"{unique}-check-{topic}", dead_letter_topic=scratch)
    return [e.event for e in got]


def test_poison_on_every_topic_is_parked_and_the_loop_completes(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    raw = run_config(stack, unique, tmp_path, "dynamic_by_explorer", 1)
    raw["buffer"]["total_steps"] = STEPS
    raw["stack"]["kafka"]["partitions"] = 1  # the poison comes first in every topic
    raw["buffer"]["explorer_input"]["eval_tasksets"] = [
        {
            "name": "arith_eval",
            "storage_type": "generator",
            "path": "arithmetic",
            "generator_args": {"digits": 1, "operators": ["+"], "num_tasks": 2, "seed": 7},
            "format": {"prompt_key": "question", "response_key": "answer"},
            "rollout_args": {"temperature": 0.0},
        }
    ]
    raw["synchronizer"]["sync_timeout"] = 60
    paths = {}
    for mode in ("explore", "train"):
        paths[mode] = tmp_path / f"{mode}.yaml"
        paths[mode].write_text(yaml.safe_dump({**raw, "mode": mode}))
    cfg = load_config(paths["explore"])
    plan = RunPlan(cfg)
    topics = plan.topics
    ensure_topics(cfg.stack.kafka, topics)
    by_suffix = {
        "tasks": topics.tasks,
        "eval-tasks": topics.eval_tasks,
        "experiences": plan.experience_topic,
        "weights": topics.weights,
        "control": topics.control,
        "metrics": topics.metrics,
    }
    poison = poison_for(EventCodec.default())
    with kafka_backend(cfg.stack.kafka).producer() as producer:
        for suffix, records in poison.items():
            for value, _ in records:
                producer.produce(by_suffix[suffix], value, key=b"poison", partition=0)
        producer.flush()
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )

    procs = {
        mode: subprocess.Popen(
            [sys.executable, "-m", "rft.cli.main", "run", "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for mode, path in paths.items()
    }
    outputs = {}
    for mode, proc in procs.items():
        try:
            outputs[mode], _ = proc.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            raise
    for mode, proc in procs.items():
        assert proc.returncode == 0, f"{mode} exited {proc.returncode}:\n{outputs[mode][-3000:]}"

    letters = [
        e for e in read_all(cfg, topics.dead_letter, unique + "-d") if isinstance(e, DeadLetter)
    ]
    for suffix, records in poison.items():
        topic = by_suffix[suffix]
        for offset, (value, error) in enumerate(records):
            mine = [
                d
                for d in letters
                if (d.source_topic, d.source_partition, d.source_offset) == (topic, 0, offset)
            ]
            assert mine, f"{topic}[0]@{offset} was not parked; letters: {letters}"
            for d in mine:
                assert d.payload == value and d.source_key == b"poison"
                assert d.error_class.endswith(error), (topic, offset, d.error_class)
            # the warning a user reads names the same place
            where = f"parked undecodable event {topic}[0]@{offset} in {topics.dead_letter}"
            assert any(where in out for out in outputs.values()), where
    for out in outputs.values():  # the lines a user reads, for the record
        print("\n".join(line for line in out.splitlines() if "parked undecodable" in line))
    consumers = {d.consumer for d in letters}
    assert {plan.explorer_group, plan.trainer_group} <= consumers
    assert f"{plan.run_id}.trainer-control.{cfg.trainer.name}" in consumers

    # nothing lost: every step explored and trained, every experience written
    experiences = [
        e for e in read_past_poison(cfg, plan.experience_topic, unique) if isinstance(e, Experience)
    ]
    assert len(experiences) == STEPS * cfg.buffer.batch_size * cfg.algorithm.repeat_times
    versions = [
        e for e in read_past_poison(cfg, topics.weights, unique) if isinstance(e, WeightVersion)
    ]
    assert max(v.train_step for v in versions) == STEPS


def test_truncated_and_flipped_checkpoints_are_refused_and_the_previous_version_kept(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    topics = TopicNames.for_run("rft-it", unique)
    ensure_topics(stack.kafka, topics)
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    base = {k: v.clone() for k, v in engine.state_dict().items()}
    objects = S3ObjectStore(stack.object_store, bucket="rft-it")
    store = CheckpointStore(objects, "rft-it", unique)
    weights_file = "model.safetensors"

    def write_version(version: int) -> bytes:
        directory = tmp_path / f"v{version}"
        directory.mkdir()
        save_file({k: v + 0.01 * version for k, v in base.items()}, str(directory / weights_file))
        store.write(version, version, directory)
        return (directory / weights_file).read_bytes()

    write_version(1)
    truncated = write_version(2)
    objects.put_bytes(store.file_key(2, weights_file), truncated[: len(truncated) // 2])
    flipped = bytearray(write_version(3))
    flipped[len(flipped) // 2] ^= 0x01
    objects.put_bytes(store.file_key(3, weights_file), bytes(flipped))

    with WeightFollower(
        stack.kafka,
        topics.weights,
        unique,
        store,
        dead_letter_topic=topics.dead_letter,
    ) as follower:
        announce(stack, topics.weights, store, 1)
        assert follower.wait_for(1, timeout_s=30) == 1
        assert follower.load_newest(engine) and engine.model_version == 1
        served = {k: v.clone() for k, v in engine.state_dict().items()}
        for version in (2, 3):
            announce(stack, topics.weights, store, version)
            assert follower.wait_for(version, timeout_s=30) == version
            assert not follower.load_newest(engine)
            assert engine.model_version == 1
            for name, tensor in engine.state_dict().items():
                assert torch.equal(tensor, served[name]), f"{name} changed by refused v{version}"
        for version, why in sorted(follower.refused.items()):
            print(f"\nweight version {version} refused, keeping version 1: {why}")
        uri2 = objects.uri(store.file_key(2, weights_file))
        uri3 = objects.uri(store.file_key(3, weights_file))
        assert follower.refused[2] == (
            f"checkpoint v2: file {weights_file!r} at {uri2} has the wrong size: "
            f"expected {len(truncated)} bytes, got {len(truncated) // 2}"
        )
        assert follower.refused[3].startswith(
            f"checkpoint v3: file {weights_file!r} at {uri3} is corrupt: expected sha256 "
        )


@pytest.mark.parametrize(
    ("client", "setting"),
    [("confluent", "message.max.bytes"), ("kafka-python", "max.request.size")],
)
def test_oversized_records_are_refused_before_sending_and_the_writer_goes_on(
    stack: StackSettings, unique: str, client: str, setting: str
) -> None:
    limit = 20_000
    kafka = dataclasses.replace(stack.kafka, client=client, extra={setting: limit})
    topic = f"{unique}.metrics"
    with kafka_backend(kafka).admin() as admin:
        admin.create_topics([TopicSpec(topic, 1, 1)])
    big = Metric("c", "r", 1, {f"value_{i:05d}": float(i) for i in range(2000)})
    size = len(EventCodec.default().encode(big))
    with EventWriter.open(kafka, transactional_id=f"{unique}-tx") as writer:
        writer.begin()
        with pytest.raises(RecordTooLargeError) as refused:
            writer.send(topic, big, key="big")
        writer.send(topic, Metric("c", "r", 2, {"small": 1.0}), key="small")
        writer.commit()
    message = str(refused.value)
    print(f"\n[{client}] {type(refused.value).__name__}: {message}")
    assert message.startswith(f"record for {topic} (key 'big') is ")
    assert (
        f"({size:,} of them the event), over the producer's limit of {limit:,} bytes ({setting}"
        in message
    )
    got = read_all(SimpleNamespace(stack=SimpleNamespace(kafka=kafka)), topic, unique + "-r")
    assert [m.step for m in got] == [2]  # the transaction went on and committed the small one


RELEASE_HUNG = threading.Event()


def bad_input_reward(
    response_text: str, payload: dict[str, Any], **args: Any
) -> tuple[float, dict]:
    if payload.get("explode"):
        raise ValueError(f"cannot score {payload['question']!r}")
    if payload.get("hang"):
        RELEASE_HUNG.wait(120)  # a reward fn that never returns in time
    return float(str(payload["answer"]) in response_text), {}


REWARD_FUNCTIONS.add("bad_input_reward", bad_input_reward, replace=True)


def test_explorer_dead_letters_oversized_raising_and_hanging_tasks_and_goes_on(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    limit = 2000
    long_question = "Sum these: " + " + ".join(["1"] * 200) + "?"
    rows = [
        {"question": "What is 1 + 1?", "answer": 2},
        {"question": long_question, "answer": 200},
        {"question": "What is 2 + 3?", "answer": 5},
        {"question": "What is 3 + 3?", "answer": 6, "explode": True},
        {"question": "What is 4 + 4?", "answer": 8, "hang": True},
    ]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw = run_config(stack, unique, tmp_path, "trainer_driven", 1)
    raw["mode"] = "explore"
    raw["model"] = {"model_path": "tiny", "max_prompt_tokens": 480, "max_response_tokens": 8}
    raw["algorithm"]["repeat_times"] = 2
    raw["buffer"]["batch_size"] = len(rows)
    raw["buffer"]["total_steps"] = 1
    raw["buffer"]["explorer_input"]["taskset"] = {
        "name": "sizes",
        "path": str(data),
        "format": {"prompt_key": "question", "response_key": "answer"},
    }
    raw["stack"]["kafka"]["extra"] = {"message.max.bytes": limit}
    raw["buffer"]["explorer_input"]["default_workflow_type"] = "simple_workflow"
    raw["buffer"]["explorer_input"]["default_reward_fn_type"] = "bad_input_reward"
    raw["explorer"] |= {"max_timeout": 8, "max_retry_times": 1, "runner_per_model": 5}
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )

    try:
        summary = Explorer(cfg, idle_timeout_s=10).run()
    finally:
        RELEASE_HUNG.set()  # let the abandoned reward calls end

    assert summary.steps == 1
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    tasks = {
        t.task_id: t for t in read_all(cfg, plan.topics.tasks, unique + "-t") if isinstance(t, Task)
    }
    explored = {tasks[e.task_id].payload["question"] for e in experiences}
    assert explored == {rows[0]["question"], rows[2]["question"]}
    assert len(experiences) == 2 * 2  # whole groups of the two tasks that fit
    letters = {}
    for d in read_all(cfg, plan.topics.dead_letter, unique + "-d"):
        parked = EventCodec.default().decode(d.payload)
        assert isinstance(parked, Task) and d.source_topic == plan.topics.tasks
        letters[parked.payload["question"]] = (d, parked)
        print(
            f"\ndead letter {d.source_topic}[{d.source_partition}]@{d.source_offset}: "
            f"{d.error_class}: {d.error_message}"
        )
    assert set(letters) == {rows[i]["question"] for i in (1, 3, 4)}

    failed, parked = letters[rows[3]["question"]]
    assert failed.error_class.endswith("WorkflowFailedError")
    assert failed.error_message.startswith(
        f"task {parked.task_id}: gave up after 2 attempt(s) (explorer.max_retry_times is 1); "
        f"last: ValueError: cannot score 'What is 3 + 3?' (at {__file__}:"
    )
    assert failed.error_message.endswith(" in bad_input_reward)")
    hung, parked = letters[rows[4]["question"]]
    assert hung.error_class.endswith("WorkflowTimeoutError")
    assert hung.error_message == (
        f"task {parked.task_id}: gave up after 2 attempt(s) (explorer.max_retry_times is 1); "
        "last: timed out after 8 s while its reward fn 'bad_input_reward' scored it"
    )

    letter, parked = letters[long_question]
    assert letter.error_class.endswith("RecordTooLargeError")
    assert letter.error_message.startswith(
        f"task {parked.task_id}: an experience's record for {plan.experience_topic} "
        f"(key {parked.task_id!r}) is "
    )
    assert (
        f"over the producer's limit of {limit:,} bytes (message.max.bytes" in letter.error_message
    )
    # every task's offset committed with the step, the parked one included
    with EventReader.open(cfg.stack.kafka, plan.explorer_group, [plan.topics.tasks]) as reader:
        assert sum(o.offset for o in reader.committed()) == len(rows)


def test_a_dead_letter_too_big_to_send_is_parked_without_its_payload(
    stack: StackSettings, unique: str
) -> None:
    limit = 3000
    kafka = dataclasses.replace(stack.kafka, extra={"message.max.bytes": limit})
    source, dead = f"{unique}.src", f"{unique}.dead-letter"
    with kafka_backend(kafka).admin() as admin:
        admin.create_topics([TopicSpec(source, 1, 1), TopicSpec(dead, 1, 1)])
    poison = b"\x00" * (limit - 200)  # fits as a record; with the letter's fields it does not
    with EventWriter.open(kafka) as writer:
        writer.send_raw(source, poison, key=b"k")
        writer.send(source, Metric("c", "r", 7, {}), key="k")
    with EventReader.open(kafka, f"g-{unique}", [source], dead_letter_topic=dead) as reader:
        got: list[Any] = []
        for _ in range(60):
            got += reader.poll(10, 0.5)
            if got and reader.parked_count:
                break
        reader.commit()
    assert [e.event.step for e in got] == [7]  # the reader went on past it
    (letter,) = read_all(SimpleNamespace(stack=SimpleNamespace(kafka=kafka)), dead, unique + "-d")
    assert letter.payload == b"" and (letter.source_topic, letter.source_offset) == (source, 0)
    print(f"\n{letter.error_message}")
    assert letter.error_message.endswith(
        f"[payload of {len(poison):,} bytes left out: the letter would be over the producer's "
        f"record size limit; the original is at {source}[0]@0]"
    )


def test_a_tasks_topic_holding_only_a_corrupt_record_counts_as_published(
    stack: StackSettings, unique: str
) -> None:
    # `rft run` asks before publishing; a wrong "no" would publish the taskset twice
    topic = f"{unique}.tasks"
    with kafka_backend(stack.kafka).admin() as admin:
        admin.create_topics([TopicSpec(topic, 1, 1)])
    with EventWriter.open(stack.kafka) as writer:
        writer.send_raw(topic, b"not an event", key=b"k")
    assert has_committed_tasks(stack.kafka, topic, quiet_s=5.0)


def test_a_corrupt_demonstration_on_an_auxiliary_topic_is_parked_and_the_next_one_read(
    stack: StackSettings, unique: str
) -> None:
    kafka = dataclasses.replace(stack.kafka, partitions=1)
    topic, dead = f"{unique}.curated", f"{unique}.dead-letter"
    ensure_topics(kafka, [topic, dead])
    with EventWriter.open(kafka) as writer:
        writer.send_raw(topic, b"not an event", key=b"c0")
        writer.send(topic, experience("c1", 1, 0, 3, 1.0), key="c1")
    context = ExpertContext(
        build_byte_tokenizer(), 64, 2, kafka=kafka, group_prefix=unique, dead_letter_topic=dead
    )
    buffer = AuxiliaryBufferConfig(path=topic, name="curated", storage_type="kafka")
    source = EXPERT_SOURCES.get(buffer.storage_type)(buffer, context)
    got = None
    for _ in range(30):  # the first polls may come before the group's assignment
        got = source.take(1)
        if got is not None:
            break
    source.close()
    assert got is not None and [e.experience_id for e in got] == ["curated:0:1"]
    (letter,) = read_all(SimpleNamespace(stack=SimpleNamespace(kafka=kafka)), dead, unique + "-d")
    assert (letter.source_topic, letter.source_offset, letter.payload) == (
        topic,
        0,
        b"not an event",
    )
    assert letter.consumer == f"{unique}.trainer-aux.curated"


def test_rft_run_parks_a_corrupt_metric_and_reports_the_run(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    raw = run_config(stack, unique, tmp_path)  # mode both: rft run itself follows the metrics
    raw["buffer"]["total_steps"] = 4
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    plan = RunPlan(load_config(config_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "explorer step" in line:  # the run is under way: rft run is reading metrics
                with kafka_backend(stack.kafka).producer() as producer:
                    producer.produce(plan.topics.metrics, b"\xc3\x01 torn", key=b"poison")
                    producer.flush()
                break
        out, _ = proc.communicate(timeout=540)
    except BaseException:
        proc.kill()
        raise
    out = "".join(lines) + out
    assert proc.returncode == 0, out[-3000:]
    assert "== run summary" in out
    letters = [
        d
        for d in read_all(SimpleNamespace(stack=stack), plan.topics.dead_letter, unique + "-d")
        if isinstance(d, DeadLetter)
    ]
    (letter,) = [d for d in letters if d.source_topic == plan.topics.metrics]
    assert letter.payload == b"\xc3\x01 torn" and letter.error_class.endswith("TruncatedEventError")
    assert letter.consumer.startswith(f"{plan.run_id}.supervisor.")
    line = next(x for x in out.splitlines() if "parked undecodable event" in x)
    print(f"\n{line}")
    assert f"{plan.topics.metrics}[{letter.source_partition}]@{letter.source_offset}" in line
