"""Load-time run-length rules (rft.config.run_length): too few tasks for total_steps, and a
staleness bound that drops the batches the steps need, are refused with the numbers and the keys;
what may still fall short is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config.loader import ConfigValidationError, ConfigWarning
from rft.consumers.run_plan import RunPlan
from tests.unit.config_samples import MINIMAL


def config(tmp_path: Path, text: str, *overrides: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return load_config(path, list(overrides))


def file_taskset(tmp_path: Path, rows: int) -> str:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"{i} + 1", "answer": str(i + 1)}) + "\n" for i in range(rows)
        )
    )
    return MINIMAL.replace(
        "      storage_type: generator\n      path: arithmetic\n",
        f"      storage_type: file\n      path: {path}\n"
        "      format: {prompt_key: question, response_key: answer}\n",
    )


def test_a_file_taskset_too_small_for_total_steps_is_refused_with_the_numbers(tmp_path: Path):
    # 40 rows x 1 epoch = 40 tasks; 20 steps x 4 tasks = 80
    with pytest.raises(ConfigValidationError) as err:
        config(tmp_path, file_taskset(tmp_path, 40), "buffer.total_steps=20")
    text = str(err.value)
    assert "`buffer.total_steps`" in text and "override 'buffer.total_steps=20'" in text
    assert "20 steps × buffer.batch_size 4 = 80 tasks" in text
    assert "taskset 'train' has 40 task(s) × buffer.total_epochs 1 = 40" in text
    assert "at most 10 of 20 steps" in text and "buffer.total_epochs to >= 2" in text


def test_epochs_count_toward_the_tasks(tmp_path: Path):
    cfg = config(
        tmp_path, file_taskset(tmp_path, 40), "buffer.total_steps=20", "buffer.total_epochs=2"
    )
    assert cfg.buffer.total_steps == 20


def test_a_generator_is_counted_by_its_rows_and_a_leftover_is_named(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 30}\n"
    with pytest.raises(ConfigValidationError, match=r"run out after 7 full step\(s\) \(2 task"):
        config(tmp_path, text, "buffer.total_steps=8")
    assert config(tmp_path, text, "buffer.total_steps=7").buffer.total_steps == 7


def test_trainer_total_steps_is_checked_and_named(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 30}\n"
    with pytest.raises(ConfigValidationError, match="`trainer.total_steps`"):
        config(tmp_path, text, "trainer.total_steps=9")


def test_derived_steps_take_whole_batches_and_say_what_is_left(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 30}\n"
    with pytest.warns(ConfigWarning, match=r"derives 7 steps .* the last 2 task\(s\) make no full"):
        cfg = config(tmp_path, text)
    assert RunPlan(cfg).total_steps == 7


def test_fewer_tasks_than_a_batch_is_refused(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 3}\n"
    with pytest.raises(ConfigValidationError, match="fewer than one batch"):
        config(tmp_path, text)


def test_an_unreadable_taskset_is_left_to_the_publisher(tmp_path: Path):
    text = file_taskset(tmp_path, 4).replace(
        str(tmp_path / "tasks.jsonl"), str(tmp_path / "gone.jsonl")
    )
    assert config(tmp_path, text, "buffer.total_steps=50").buffer.total_steps == 50


def test_mode_bench_is_not_checked(tmp_path: Path):
    text = (
        MINIMAL
        + "      generator_args: {num_tasks: 3}\n"
        + "    eval_tasksets:\n      - {name: e, storage_type: generator, path: arithmetic}\n"
        + "mode: bench\n"
    )
    assert config(tmp_path, text, "buffer.total_steps=50").mode == "bench"


ASYNC = "synchronizer: {sync_style: fully_async, sync_interval: 1, max_head_offpolicyness: 2}\n"


def test_eta_above_max_staleness_is_refused_for_one_explorer(tmp_path: Path):
    text = MINIMAL + ASYNC
    with pytest.raises(ConfigValidationError) as err:
        config(tmp_path, text, "buffer.trainer_input.max_staleness=1")
    message = str(err.value)
    assert "`synchronizer.max_head_offpolicyness`" in message
    assert "synchronizer.max_head_offpolicyness 2 lets an explorer" in message
    assert "buffer.trainer_input.max_staleness 1 drops" in message
    assert "buffer.trainer_input.max_staleness >= 2" in message


def test_eta_within_max_staleness_loads(tmp_path: Path):
    cfg = config(tmp_path, MINIMAL + ASYNC, "buffer.trainer_input.max_staleness=2")
    assert cfg.synchronizer.max_head_offpolicyness == 2


def test_several_explorers_make_it_a_warning(tmp_path: Path):
    with pytest.warns(ConfigWarning, match="the group's 2 explorers each run their total_steps"):
        config(
            tmp_path,
            MINIMAL + ASYNC,
            "buffer.trainer_input.max_staleness=1",
            "explorer.max_explorers=2",
        )


def test_fixed_style_lead_counts_as_the_bound(tmp_path: Path):
    text = MINIMAL + "synchronizer: {sync_style: fixed, sync_interval: 2, sync_offset: 1}\n"
    with pytest.raises(ConfigValidationError, match=r"sync_offset 1 \+ sync_interval 2 - 1 = 2"):
        config(tmp_path, text, "buffer.trainer_input.max_staleness=1")
    assert config(tmp_path, text, "buffer.trainer_input.max_staleness=2") is not None


def test_no_bound_with_max_staleness_warns(tmp_path: Path):
    text = MINIMAL + "synchronizer: {sync_style: fully_async, sync_interval: 1}\n"
    with pytest.warns(ConfigWarning, match="nothing bounds how many versions"):
        config(tmp_path, text, "buffer.trainer_input.max_staleness=1")


def test_a_group_that_does_not_feed_the_trainer_is_not_counted(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 6}\n"
    shadow = config(tmp_path, text, "buffer.total_steps=50", "explorer.experiences_to=own")
    assert shadow.buffer.total_steps == 50


def test_a_group_that_starts_later_in_the_tasks_is_not_counted(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 6}\n"
    late = config(tmp_path, text, "buffer.total_steps=50", "explorer.tasks_from=latest")
    assert late.buffer.total_steps == 50


def test_an_offline_trainer_is_not_checked(tmp_path: Path):
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + "      generator_args: {num_tasks: 6}\n" + ASYNC)
    overrides = ["buffer.total_steps=50", "buffer.trainer_input.max_staleness=1"]
    with pytest.raises(ConfigValidationError):
        load_config(path, overrides)
    assert load_config(path, overrides, trains_offline=True).buffer.total_steps == 50


def test_a_replay_that_trains_groups_again_is_not_counted(tmp_path: Path):
    text = MINIMAL + "      generator_args: {num_tasks: 6}\n"
    key = "buffer.trainer_input.experience_buffer.replay_buffer"
    with pytest.raises(ConfigValidationError):
        config(tmp_path, text, "buffer.total_steps=50", f"{key}.enable=true")
    replayed = config(
        tmp_path,
        text,
        "buffer.total_steps=50",
        f"{key}.enable=true",
        f"{key}.reuse_cooldown_time=0",
    )
    assert replayed.buffer.total_steps == 50


def test_a_staleness_bound_is_not_applied_to_a_dataset_run_and_says_so(tmp_path: Path):
    """SFT trains a dataset's rows, which no explorer sampled: a max_staleness below the sync
    style's bound (refused for an RL run) is set aside with a notice."""
    data = tmp_path / "chats.jsonl"
    chat = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}]
    data.write_text("".join(json.dumps({"messages": chat}) + "\n" for _ in range(16)))
    bound = ["buffer.trainer_input.max_staleness=1", "synchronizer.sync_interval=8"]
    dataset = [
        "mode=train",
        "algorithm.algorithm_type=sft",
        "buffer.trainer_input.experience_buffer.name=chats",
        "buffer.trainer_input.experience_buffer.storage_type=file",
        f"buffer.trainer_input.experience_buffer.path={data}",
        "buffer.trainer_input.experience_buffer.format.prompt_type=messages",
        "buffer.trainer_input.experience_buffer.format.messages_key=messages",
        "buffer.total_steps=4",
    ]
    with pytest.warns(ConfigWarning, match="1 is not applied: algorithm_type sft trains on a data"):
        cfg = config(tmp_path, MINIMAL, *dataset, *bound)
    assert cfg.buffer.trainer_input.max_staleness == 1
    with pytest.raises(ConfigValidationError, match="every batch sampled at that bound is dropped"):
        config(tmp_path, MINIMAL, "buffer.total_steps=4", *bound)  # a GRPO run: refused
