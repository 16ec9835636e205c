"""TaskPublisher: task ids, task selectors (per-epoch order), eval handling and the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.cli.main import main
from rft.config.schema import FormatConfig, TaskSelectorConfig, TasksetConfig
from rft.events.models import Task
from rft.events.topics import TopicNames
from rft.producers.task_publisher import TaskPublisher, epoch_order, publish_tasksets
from rft.producers.taskset_reader import load_taskset

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasksets"


class RecordingSink:
    """Keeps what the publisher sends, in order (stands in for the Kafka writer)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Task, str | None]] = []
        self.flushes = 0

    def send(self, topic: str, event: Task, key: str | None = None) -> None:
        self.sent.append((topic, event, key))

    def flush(self) -> None:
        self.flushes += 1


def arithmetic(num_tasks: int = 10, **kwargs: object) -> TasksetConfig:
    return TasksetConfig(
        name="arith",
        path="arithmetic",
        storage_type="generator",
        generator_args={"num_tasks": num_tasks, "seed": 1},
        **kwargs,  # type: ignore[arg-type]
    )


def test_epochs_are_seeded_shuffles_with_stable_ids() -> None:
    loaded = load_taskset(
        arithmetic(repeat_times=4, task_selector=TaskSelectorConfig(selector_type="shuffle"))
    )
    sink = RecordingSink()
    summary = TaskPublisher(sink, clock=lambda: 123).publish(loaded, "p.n.tasks", epochs=3, seed=7)
    assert summary.counts == {"arith": {0: 10, 1: 10, 2: 10}}
    assert summary.total == 30 and sink.flushes == 1
    tasks = [task for _, task, _ in sink.sent]
    assert len({t.task_id for t in tasks}) == 30
    for topic, task, key in sink.sent:
        assert topic == "p.n.tasks" and key == task.task_id
        assert task.task_id == f"arith:{task.epoch}:{task.index}"
        assert task.payload == loaded.rows[task.index].payload
        assert (task.workflow, task.reward_fn, task.repeat_times) == (
            "math_workflow",
            "math_reward",
            4,
        )
        assert task.format["prompt_key"] == "question" and task.created_at == 123
        assert not task.is_eval
    per_epoch = [[t.index for t in tasks if t.epoch == e] for e in range(3)]
    assert all(sorted(order) == list(range(10)) for order in per_epoch)
    assert per_epoch == [epoch_order(loaded, 7, e) for e in range(3)]
    assert per_epoch[0] != per_epoch[1]  # seed + epoch reshuffles

    again = RecordingSink()
    TaskPublisher(again, clock=lambda: 123).publish(loaded, "p.n.tasks", epochs=3, seed=7)
    assert [t for _, t, _ in again.sent] == tasks


@pytest.mark.parametrize("selector", ["sequential", "shuffle", "random"])
def test_each_task_carries_its_position_in_the_published_sequence(selector: str) -> None:
    loaded = load_taskset(arithmetic(12, task_selector=TaskSelectorConfig(selector_type=selector)))
    sink = RecordingSink()
    TaskPublisher(sink).publish(loaded, "p.n.tasks", epochs=3, seed=5)
    tasks = [task for _, task, _ in sink.sent]
    # 0, 1, ... in sending order over every epoch: the selector's order is the order by position
    assert [t.position for t in tasks] == list(range(len(tasks)))
    assert sorted(tasks, key=lambda t: t.published_order) == tasks


def test_sequential_selector_publishes_file_order_every_epoch() -> None:
    loaded = load_taskset(arithmetic())  # Trinity-RFT's default selector: sequential
    sink = RecordingSink()
    TaskPublisher(sink).publish(loaded, "p.n.tasks", epochs=2, seed=7)
    assert [(t.epoch, t.index) for _, t, _ in sink.sent] == [
        (e, i) for e in range(2) for i in range(10)
    ]


def test_random_selector_draws_with_replacement_and_keeps_ids_unique() -> None:
    selector = TaskSelectorConfig(selector_type="random")
    loaded = load_taskset(arithmetic(40, task_selector=selector))
    sink = RecordingSink()
    TaskPublisher(sink).publish(loaded, "p.n.tasks", epochs=1, seed=3)
    indices = [t.index for _, t, _ in sink.sent]
    assert len(indices) == 40
    assert len(set(indices)) < 40  # 40 draws from 40 rows repeat some (seeded, so stable)
    ids = [t.task_id for _, t, _ in sink.sent]
    assert len(set(ids)) == 40
    for _, task, _ in sink.sent:
        assert task.payload == loaded.rows[task.index].payload
    again = RecordingSink()
    TaskPublisher(again).publish(loaded, "p.n.tasks", epochs=1, seed=3)
    assert [t.task_id for _, t, _ in again.sent] == ids


def test_eval_taskset_one_epoch_in_file_order() -> None:
    loaded = load_taskset(arithmetic(5), is_eval=True)
    sink = RecordingSink()
    topics = TopicNames.for_run("p", "n")
    summary = publish_tasksets(TaskPublisher(sink), [loaded], topics, epochs=4, seed=0)
    assert [(topic, t.index, t.position, t.epoch, t.is_eval) for topic, t, _ in sink.sent] == [
        ("p.n.eval-tasks", i, i, 0, True) for i in range(5)
    ]
    assert summary.counts == {"arith": {0: 5}}


def test_summary_lists_skipped_rows() -> None:
    path = EXAMPLES / "arithmetic_malformed.jsonl"
    fmt = FormatConfig(prompt_key="question", response_key="answer")
    loaded = load_taskset(
        TasksetConfig(name="m", path=str(path), format=fmt), on_bad_rows="skip-and-report"
    )
    summary = TaskPublisher(RecordingSink()).publish(loaded, "t", epochs=2, seed=0)
    assert summary.total == 6 and summary.bad_row_count == 5
    lines = summary.lines()
    assert lines[0] == "m -> t: 6 tasks (epoch 0: 3, epoch 1: 3)"
    assert f"m: skipped bad row {path}:2: bad JSON at column 43: Expecting ',' delimiter" in lines


def test_cli_refuses_bad_file_and_names_lines(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "arithmetic_malformed.jsonl"
    argv = ["publish", str(path), "--prompt-key", "question", "--response-key", "answer"]
    assert main([*argv, "--topic", "x", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "nothing published" in err and f"{path}:8: bad JSON" in err
    assert main([*argv, "--topic", "x", "--dry-run", "--on-bad-rows", "skip-and-report"]) == 3
    captured = capsys.readouterr()
    assert "3 valid rows, 5 bad" in captured.out
    assert f"skipped bad row {path}:3: expected a JSON object" in captured.err


def test_cli_needs_one_source_and_one_target(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "arithmetic_small.jsonl")
    assert main(["publish", "--dry-run"]) == 1
    assert "PATH or --config" in capsys.readouterr().err
    assert main(["publish", path, "--prompt-key", "question", "--dry-run"]) == 1
    assert "--project and --name" in capsys.readouterr().err
    assert main(["publish", path, "--topic", "t", "--project", "p", "--dry-run"]) == 1
