"""Every config value that names a registered part is checked against its registry at load time,
in the loading process, with the key, file:line and the registry's close-match hint; plugins make
user parts selectable; Trinity's trainer-only configs load with train_batch_size alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.workflows import WORKFLOWS
from tests.unit.config_samples import MINIMAL

TASKSET = "buffer.explorer_input.taskset"

# (override, key path reported, close match the hint must offer)
MISSPELT = [
    ("algorithm.algorithm_type=grpoo", "algorithm.algorithm_type", "grpo"),
    ("algorithm.advantage_fn=grpoo", "algorithm.advantage_fn", "grpo"),
    ("algorithm.policy_loss_fn=ppoo", "algorithm.policy_loss_fn", "ppo"),
    ("algorithm.kl_loss_fn=k33", "algorithm.kl_loss_fn", "k3"),
    ("algorithm.kl_penalty_fn=k22", "algorithm.kl_penalty_fn", "k2"),
    ("algorithm.entropy_loss_fn=defualt", "algorithm.entropy_loss_fn", "default"),
    ("algorithm.loss_agg_mode=token-meen", "algorithm.loss_agg_mode", "token-mean"),
    ("algorithm.sample_strategy=defalt", "algorithm.sample_strategy", "default"),
    (
        f"{TASKSET}.task_selector.selector_type=shufle",
        f"{TASKSET}.task_selector.selector_type",
        "shuffle",
    ),
    (
        f"{TASKSET}.default_workflow_type=math_workflw",
        f"{TASKSET}.default_workflow_type",
        "math_workflow",
    ),
    (
        f"{TASKSET}.default_reward_fn_type=math_rewrd",
        f"{TASKSET}.default_reward_fn_type",
        "math_reward",
    ),
    (f"{TASKSET}.path=arithmetik", f"{TASKSET}.path", "arithmetic"),
    (
        "buffer.explorer_input.default_workflow_type=math_wf",
        "buffer.explorer_input.default_workflow_type",
        "math_workflow",
    ),
    ("explorer.rollout_model.engine_type=hff", "explorer.rollout_model.engine_type", "hf"),
    ("trainer.trainer_type=torc", "trainer.trainer_type", "torch"),
    ("trainer.optim.warmup_style=cosin", "trainer.optim.warmup_style", "cosine"),
    ("synchronizer.sync_style=fixd", "synchronizer.sync_style", "fixed"),
    ("monitor.monitor_type=consol", "monitor.monitor_type", "console"),
    ("stack.kafka.client=confluen", "stack.kafka.client", "confluent"),
]


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("override", "key", "hint"), MISSPELT)
def test_misspelt_part_names_fail_at_load_with_key_and_hint(
    tmp_path: Path, override: str, key: str, hint: str
) -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, MINIMAL), [override])
    problems = [p for p in info.value.problems if p.path == key]
    assert problems, f"no problem reported at {key}: {info.value}"
    text = str(problems[0])
    assert f"did you mean {hint!r}?" in text
    assert f"override {override!r}" in text  # where the bad value came from


def test_a_misspelt_name_in_the_file_is_placed_at_its_line(tmp_path: Path) -> None:
    text = MINIMAL.replace("  repeat_times: 2\n", "  repeat_times: 2\n  advantage_fn: grpoo\n")
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, text))
    assert str(info.value).startswith(f"{tmp_path / 'run.yaml'}:5: `algorithm.advantage_fn`")


def test_part_arguments_are_checked_against_the_part(tmp_path: Path) -> None:
    cases = [
        (f"{TASKSET}.task_selector.kwargs.window=3", f"{TASKSET}.task_selector.kwargs.window"),
        ("algorithm.sample_strategy_args.ratio=0.5", "algorithm.sample_strategy_args.ratio"),
        (f"{TASKSET}.generator_args.digitz=2", f"{TASKSET}.generator_args.digitz"),
    ]
    for override, key in cases:
        with pytest.raises(ConfigValidationError) as info:
            load_config(write(tmp_path, MINIMAL), [override])
        assert [p.path for p in info.value.problems] == [key]
        assert "is not an argument of" in str(info.value)


def test_a_plugin_file_makes_its_workflow_selectable(tmp_path: Path) -> None:
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(
        "from rft.workflows import WORKFLOWS\n"
        "from rft.workflows.math_workflow import MathWorkflow\n\n\n"
        "@WORKFLOWS.register('plugin_math_workflow', replace=True)\n"
        "class PluginMath(MathWorkflow):\n"
        "    pass\n",
        encoding="utf-8",
    )
    text = MINIMAL.replace("math_workflow", "plugin_math_workflow")
    with pytest.raises(ConfigValidationError, match="plugin_math_workflow"):
        load_config(write(tmp_path, text))
    cfg = load_config(write(tmp_path, text + "plugins: [my_plugin.py]\n"))  # relative to the file
    assert cfg.plugins == ["my_plugin.py"]
    assert "plugin_math_workflow" in WORKFLOWS


def test_a_plugin_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config(write(tmp_path, MINIMAL + "plugins: [no_such_module_xyz]\n"))
    assert [p.path for p in info.value.problems] == ["plugins[0]"]
    assert "ModuleNotFoundError" in str(info.value)


def test_trainer_only_config_with_train_batch_size_alone(tmp_path: Path) -> None:
    text = MINIMAL.replace("  batch_size: 4\n", "  train_batch_size: 16\n").replace(
        "repeat_times: 2", "repeat_times: 8"
    )
    cfg = load_config(write(tmp_path, text), ["mode=train"])
    assert (cfg.buffer.train_batch_size, cfg.buffer.batch_size) == (16, 2)
    with pytest.raises(ConfigValidationError, match="not a multiple of algorithm.repeat_times"):
        load_config(write(tmp_path, text), ["buffer.train_batch_size=12"])
    with pytest.raises(ConfigValidationError, match="is required"):
        load_config(write(tmp_path, MINIMAL.replace("  batch_size: 4\n", "")))


REPLAY = "buffer.trainer_input.experience_buffer.replay_buffer"


def test_replay_settings_are_checked_at_load(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [f"{REPLAY}.enable=true", f"{REPLAY}.priority_fn_args={{decay: 0.5}}"],
    )
    assert cfg.buffer.trainer_input.experience_buffer.replay_buffer.enable
    cases = [
        (f"{REPLAY}.priority_fn=linear_decy", f"{REPLAY}.priority_fn", "linear_decay"),
        (f"{REPLAY}.priority_fn_args={{decai: 1}}", f"{REPLAY}.priority_fn_args.decai", "decay"),
        (
            "buffer.trainer_input.experience_buffer.capacity=4",
            "buffer.trainer_input.experience_buffer.capacity",
            "must hold at least one batch",
        ),
    ]
    for override, key, said in cases:
        with pytest.raises(ConfigValidationError) as info:
            load_config(write(tmp_path, MINIMAL), [f"{REPLAY}.enable=true", override])
        assert [p.path for p in info.value.problems] == [key]
        assert said in str(info.value)


def test_trinity_runner_num_sets_tasks_in_flight_per_engine(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL), ["explorer.runner_num=32"])
    assert cfg.explorer.runner_per_model == 32  # one engine: all 32 runners on it
    cfg = load_config(write(tmp_path, MINIMAL), ["explorer.runner_per_model=4"])
    assert cfg.explorer.runner_num == 4


def test_betas_need_two_numbers(tmp_path: Path) -> None:
    with pytest.raises(ConfigValidationError, match="needs two numbers"):
        load_config(write(tmp_path, MINIMAL), ["trainer.optim.betas=0.9"])


def test_engine_args_an_engine_does_not_read_are_refused_at_load(tmp_path: Path) -> None:
    key = "explorer.rollout_model.engine_args"
    with pytest.raises(ConfigValidationError) as err:
        load_config(write(tmp_path, MINIMAL), [f"{key}.path=recorded.jsonl"])
    message = str(err.value)
    assert f"`{key}.path` is not read by engine 'hf' (it reads: nothing)" in message
    assert f"override '{key}.path=recorded.jsonl'" in message
