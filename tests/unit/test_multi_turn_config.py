"""The multi-turn keys are real: workflow_args checked against the workflow's declared args at load,
format.tool_call_parser checked against TOOL_CALL_PARSERS, enable_concatenated_multi_turn and
tools_key carried to the tasks; environment generators give train and held-out eval seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.environments import EVAL_SEED_START
from rft.producers.generators import TASK_GENERATORS
from rft.producers.taskset_reader import load_taskset
from rft.workflows import WORKFLOWS
from tests.unit.config_samples import MINIMAL

GAME = MINIMAL.replace("type: math_workflow", "type: guess_number").replace(
    "path: arithmetic",
    "path: guess_number\n      generator_args: {num_tasks: 8}\n"
    "      workflow_args: {max_turns: 3, high: 50}",
)
TASKSET = "buffer.explorer_input.taskset"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_workflow_args_are_checked_against_the_workflow(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GAME))
    assert cfg.buffer.explorer_input.taskset is not None
    for override, key in [
        (f"{TASKSET}.workflow_args.hihg=9", f"{TASKSET}.workflow_args.hihg"),
        (f"{TASKSET}.workflow_args.tools=[python]", f"{TASKSET}.workflow_args.tools"),
    ]:
        with pytest.raises(ConfigValidationError) as info:
            load_config(write(tmp_path, GAME), [override])
        assert [p.path for p in info.value.problems] == [key]
        assert "is not an argument of GuessNumberWorkflow" in str(info.value)
    tool = (
        GAME.replace("type: guess_number", "type: multiplication_tool")
        .replace("path: guess_number", "path: multiplication")
        .replace("{max_turns: 3, high: 50}", "{max_turns: 3, tools: [calculator], max_digits: 3}")
    )
    load_config(write(tmp_path, tool))  # the tool workflow reads tools; multiplication digits


def test_countdown_declares_numbers_key(tmp_path: Path) -> None:
    countdown = WORKFLOWS.get("countdown_workflow")
    accepts = countdown.workflow_args_signature()
    assert accepts is not None
    text = (
        GAME.replace("type: guess_number", "type: countdown_workflow")
        .replace("path: guess_number", "path: countdown")
        .replace("{max_turns: 3, high: 50}", "{numbers_kee: nums}")
    )
    with pytest.raises(ConfigValidationError, match="numbers_kee"):
        load_config(write(tmp_path, text))


def test_tool_call_parser_is_checked_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, GAME), [f"{TASKSET}.format.tool_call_parser=hermez"])
    assert [p.path for p in info.value.problems] == [f"{TASKSET}.format.tool_call_parser"]
    assert "did you mean 'hermes'?" in str(info.value)


def test_multi_turn_format_keys_reach_the_tasks(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, GAME),
        [
            f"{TASKSET}.format.enable_concatenated_multi_turn=false",
            f"{TASKSET}.format.tools_key=tools",
        ],
    )
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    loaded = load_taskset(taskset)
    assert loaded.workflow == "guess_number"
    assert loaded.format["enable_concatenated_multi_turn"] == "False"
    assert loaded.format["tools_key"] == "tools"
    assert loaded.format["tool_call_parser"] == "hermes"
    assert len(loaded.rows) == 8


def test_environment_generators_split_train_and_eval_seeds() -> None:
    for name in ("frozen_lake", "guess_number", "multiplication"):
        generator = TASK_GENERATORS.get(name)
        train = generator(seed=0, num_tasks=20, split="train")
        held_out = generator(seed=0, num_tasks=20, split="eval")
        train_seeds = {row["seed"] for row in train.rows}
        eval_seeds = {row["seed"] for row in held_out.rows}
        assert len(train_seeds) == len(eval_seeds) == 20
        assert max(train_seeds) < EVAL_SEED_START <= min(eval_seeds)
        workflow = WORKFLOWS.get(train.default_workflow)()
        assert all(workflow.check_payload(row, {}) is None for row in train.rows + held_out.rows)
