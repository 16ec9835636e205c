"""Property tests of config loading: derived defaults, bounds, suggestions and YAML round trips."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.catalog import config_from_dict, load_config
from rft.config import AlgorithmConfig, ConfigValidationError, ConfigWarning
from rft.config.key_locator import KeyLocator

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def base(**algorithm: object) -> dict[str, object]:
    return {
        "project": "p",
        "name": "n",
        "algorithm": {"repeat_times": 2, **algorithm},
        "model": {"model_path": "tiny"},
        "buffer": {
            "batch_size": 4,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "taskset": {"name": "t", "storage_type": "generator", "path": "arithmetic"},
            },
        },
    }


@SETTINGS
@given(batch=st.integers(1, 10_000), repeat=st.integers(2, 64))
def test_train_batch_size_defaults_to_batch_times_repeat(batch: int, repeat: int) -> None:
    # epochs enough for one batch of the generator's 100 tasks (fewer is refused at load)
    epochs = f"buffer.total_epochs={-(-batch // 100)}"
    cfg = config_from_dict(
        base(), [f"buffer.batch_size={batch}", f"algorithm.repeat_times={repeat}", epochs]
    )
    assert cfg.buffer.train_batch_size == batch * repeat
    assert cfg.buffer.explorer_input.taskset is not None
    assert cfg.buffer.explorer_input.taskset.repeat_times == repeat


@SETTINGS
@given(batch=st.integers(max_value=0))
def test_batch_size_below_one_is_rejected_naming_key_and_value(batch: int) -> None:
    with pytest.raises(ConfigValidationError) as info:
        config_from_dict(base(), [f"buffer.batch_size={batch}"])
    (problem,) = info.value.problems
    assert problem.path == "buffer.batch_size"
    assert str(batch) in problem.message
    assert ">= 1" in problem.message


@SETTINGS
@given(value=st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not 0 < v <= 1))
def test_top_p_outside_unit_interval_is_rejected(value: float) -> None:
    data = base()
    data["buffer"]["explorer_input"]["taskset"]["rollout_args"] = {"top_p": value}  # type: ignore[index]
    with pytest.raises(ConfigValidationError) as info:
        config_from_dict(data)
    assert [p.path for p in info.value.problems] == [
        "buffer.explorer_input.taskset.rollout_args.top_p"
    ]


ALGORITHM_KEYS = [f.name for f in dataclasses.fields(AlgorithmConfig) if len(f.name) >= 8]


@SETTINGS
@given(key=st.sampled_from(ALGORITHM_KEYS), data=st.data())
def test_misspelt_key_warns_with_the_intended_key(key: str, data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(key) - 1))
    typo = key[:position] + key[position + 1 :]
    if typo in ALGORITHM_KEYS:
        return
    cfg_data = base()
    cfg_data["algorithm"][typo] = "x"  # type: ignore[index]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        config_from_dict(cfg_data)
    messages = [str(w.message) for w in record if issubclass(w.category, ConfigWarning)]
    assert any(f"`algorithm.{typo}`" in m and f"did you mean `{key}`?" in m for m in messages)


printable = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
    max_size=40,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    system_prompt=printable,
    prompt_key=printable.filter(bool),
    lr=st.floats(1e-9, 1.0),
    temperature=st.floats(0.0, 2.0),
    staleness=st.none() | st.integers(0, 100),
    sync_style=st.sampled_from(["fixed", "dynamic_by_explorer", "trainer_driven", "fully_async"]),
    workflow_args=st.dictionaries(
        st.text("abcdefgh_", min_size=1, max_size=8), st.integers() | st.booleans() | printable
    ),
)
def test_to_yaml_round_trips(
    tmp_path: Path,
    system_prompt: str,
    prompt_key: str,
    lr: float,
    temperature: float,
    staleness: int | None,
    sync_style: str,
    workflow_args: dict[str, object],
) -> None:
    cfg = config_from_dict(base())
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    taskset.format.system_prompt = system_prompt
    taskset.format.prompt_key = prompt_key
    taskset.rollout_args.temperature = temperature
    taskset.workflow_args = workflow_args  # free-form: carried to workflows, not name-checked
    cfg.trainer.optim.lr = lr
    cfg.buffer.trainer_input.max_staleness = staleness
    cfg.synchronizer.sync_style = sync_style  # type: ignore[assignment]
    path = tmp_path / "dumped.yaml"
    path.write_text(cfg.to_yaml(), encoding="utf-8")
    assert load_config(path) == cfg


@SETTINGS
@given(
    keys=st.lists(st.text("abcxyz_", min_size=1, max_size=6), min_size=1, max_size=4, unique=True),
    blank_lines=st.integers(0, 3),
)
def test_key_locator_finds_the_line_of_nested_keys(keys: list[str], blank_lines: int) -> None:
    lines = [""] * blank_lines
    for depth, key in enumerate(keys):
        lines.append("  " * depth + f"{key}:" + ("" if depth < len(keys) - 1 else " 1"))
    locator = KeyLocator("\n".join(lines) + "\n")
    assert locator.line_of(".".join(keys)) == blank_lines + len(keys)
    assert locator.line_of(".".join(keys[:1])) == blank_lines + 1
