"""`stages:` configs: each stage is the base config with the stage's overrides (mappings merged key
by key, the command line's overrides on top), its own run `<name>-<stage_name>`; every stage is
checked before any runs, and a problem names `stages[i].key` with its line when the stage sets the
key, or names the stage when the key comes from the base config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rft.catalog import load_config, load_pipeline
from rft.config import ConfigValidationError
from rft.config.loader import StagedConfigError
from rft.config.run_stages import RunStage, parse_stages
from rft.errors import ConfigError


def base_config(tmp_path: Path) -> dict:
    return {
        "project": "p",
        "name": "n",
        "mode": "both",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "model": {"model_path": "tiny", "max_response_tokens": 12},
        "buffer": {
            "batch_size": 2,
            "total_steps": 3,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "math_reward",
                "taskset": {
                    "name": "arith",
                    "storage_type": "generator",
                    "path": "arithmetic",
                    "generator_args": {"digits": 1, "num_tasks": 8},
                    "format": {"prompt_key": "question", "response_key": "answer"},
                },
            },
        },
        "trainer": {"optim": {"lr": 1.0e-5}},
        "stages": [
            {
                "stage_name": "sft_warmup",
                "mode": "train",
                "algorithm": {"algorithm_type": "sft"},
                "buffer": {
                    "train_batch_size": 4,
                    "trainer_input": {
                        "experience_buffer": {
                            "name": "demos",
                            "storage_type": "file",
                            "path": str(tmp_path / "demos.jsonl"),
                            "format": {"prompt_type": "messages", "messages_key": "messages"},
                        }
                    },
                },
                "trainer": {"optim": {"lr": 1.0e-4}},
            },
            {"stage_name": "rft"},
        ],
    }


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def line_of(path: Path, text: str, after: str | None = None) -> int:
    lines = path.read_text().splitlines()
    start = 0 if after is None else next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines) if i >= start and text in line) + 1


def test_each_stage_is_the_base_config_with_its_overrides_as_its_own_run(tmp_path: Path) -> None:
    pipeline = load_pipeline(write(tmp_path, base_config(tmp_path)))
    assert [(s.index, s.name) for s, _ in pipeline if s] == [(0, "sft_warmup"), (1, "rft")]
    (_, sft), (_, rft) = pipeline
    assert (sft.name, rft.name) == ("n-sft_warmup", "n-rft")
    assert (sft.mode, sft.algorithm.algorithm_type) == ("train", "sft")
    assert (rft.mode, rft.algorithm.algorithm_type) == ("both", "grpo")
    # merged key by key: the stage's lr, the base's model and explorer input stay
    assert (sft.trainer.optim.lr, rft.trainer.optim.lr) == (1.0e-4, 1.0e-5)
    assert sft.model.max_response_tokens == rft.model.max_response_tokens == 12
    assert sft.buffer.trainer_input.experience_buffer.name == "demos"
    assert rft.buffer.trainer_input.experience_buffer.storage_type != "file"
    assert sft.buffer.explorer_input.taskset is not None
    # one stage read alone is the same config
    alone = load_config(write(tmp_path, base_config(tmp_path)), run_stage="sft_warmup")
    assert alone == sft


def test_command_line_overrides_apply_to_every_stage_over_the_stage_keys(tmp_path: Path) -> None:
    path = write(tmp_path, base_config(tmp_path))
    pipeline = load_pipeline(path, ["trainer.optim.lr=0.5", "buffer.total_steps=4"])
    assert [cfg.trainer.optim.lr for _, cfg in pipeline] == [0.5, 0.5]
    assert [cfg.buffer.total_steps for _, cfg in pipeline] == [4, 4]


def test_a_stage_key_problem_names_stages_i_key_and_its_line(tmp_path: Path) -> None:
    raw = base_config(tmp_path)
    raw["stages"][1]["algorithm"] = {"algorithm_type": "no_such_algorithm"}
    path = write(tmp_path, raw)
    with pytest.raises(ConfigValidationError) as info:
        load_pipeline(path)
    (problem,) = info.value.problems
    assert problem.path == "stages[1].algorithm.algorithm_type"
    assert problem.where == f"{path}:{line_of(path, 'no_such_algorithm')}"


def test_the_problems_of_every_stage_are_reported_together(tmp_path: Path) -> None:
    raw = base_config(tmp_path)
    raw["stages"][0]["buffer"]["train_batch_size"] = 0
    raw["stages"][1]["mode"] = "explore"
    path = write(tmp_path, raw)
    with pytest.raises(ConfigValidationError) as info:
        load_pipeline(path)
    paths = sorted(p.path for p in info.value.problems)
    assert paths == ["stages[0].buffer.train_batch_size", "stages[1].mode"]
    mode = next(p for p in info.value.problems if p.path == "stages[1].mode")
    assert "a stage must train" in mode.message


def test_a_base_key_wrong_only_in_a_stage_names_the_stage(tmp_path: Path) -> None:
    raw = base_config(tmp_path)
    del raw["buffer"]["explorer_input"]["default_workflow_type"]
    path = write(tmp_path, raw)
    with pytest.raises(ConfigValidationError) as info:
        load_pipeline(path)
    # the sft stage has no explorer; the rft stage needs a workflow, which the base lacks
    (problem,) = info.value.problems
    assert not problem.path.startswith("stages[")
    assert "(in stage stages[1], 'rft')" in problem.message


@pytest.mark.parametrize(
    ("entry", "index", "path", "says"),
    [
        ({"stage_name": "sft_warmup"}, 1, "stages[1].stage_name", "already the name of stages[0]"),
        ({"stage_name": "a b"}, 1, "stages[1].stage_name", "letters, digits"),
        ({"mode": "train"}, 1, "stages[1].stage_name", "letters, digits"),
        ({"stage_name": "x", "project": "q"}, 1, "stages[1].project", "cannot be set by a stage"),
        ({"stage_name": "x", "stack": {}}, 1, "stages[1].stack", "cannot be set by a stage"),
        (
            {"stage_name": "x", "model": {"model_path": "smollm2"}},
            1,
            "stages[1].model.model_path",
            "previous stage's last weight version",
        ),
        ("rft", 1, "stages[1]", "must be a mapping"),
    ],
)
def test_malformed_stage_entries_are_refused_naming_the_entry(
    tmp_path: Path, entry: object, index: int, path: str, says: str
) -> None:
    raw = base_config(tmp_path)
    raw["stages"][index] = entry
    config = write(tmp_path, raw)
    with pytest.raises(ConfigValidationError) as info:
        load_pipeline(config)
    (problem,) = info.value.problems
    assert problem.path == path and says in problem.message


def test_a_first_stage_may_choose_its_model(tmp_path: Path) -> None:
    raw = base_config(tmp_path)
    raw["model"]["model_path"] = "smollm2"
    raw["stages"][0]["model"] = {"model_path": "tiny"}
    (_, sft), (_, rft) = load_pipeline(write(tmp_path, raw))
    assert (sft.model.model_path, rft.model.model_path) == ("tiny", "smollm2")


def test_a_staged_config_read_as_one_run_asks_for_the_stage(tmp_path: Path) -> None:
    path = write(tmp_path, base_config(tmp_path))
    with pytest.raises(StagedConfigError, match=r"has stages \(sft_warmup, rft\).*--stage NAME"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"no stage named 'grpo'.*sft_warmup, rft"):
        load_config(path, run_stage="grpo")
    raw = base_config(tmp_path)
    del raw["stages"]
    plain = write(tmp_path, raw)
    with pytest.raises(ConfigError, match="stage 'rft' asked for, but the config has no stages"):
        load_config(plain, run_stage="rft")
    assert load_pipeline(plain)[0][0] is None


def test_stages_must_be_a_list() -> None:
    assert parse_stages({"a": 1})[1][0].path == "stages"
    assert parse_stages(None) == ([], [])


def test_a_stage_sets_the_keys_under_what_it_writes() -> None:
    stage = RunStage(1, "s", {"buffer": {"explorer_input": {"eval_tasksets": [{"name": "a"}]}}})
    assert stage.sets("buffer.explorer_input.eval_tasksets[0].name")  # the list replaces
    assert not stage.sets("buffer.train_batch_size")
    assert stage.locate("buffer.explorer_input") == "stages[1].buffer.explorer_input"
    assert stage.locate("model.model_path") == "model.model_path"


def test_rft_run_takes_no_stage_and_other_verbs_ask_for_one(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write(tmp_path, base_config(tmp_path))
    cli = [sys.executable, "-m", "rft.cli.main"]
    run = subprocess.run(
        [*cli, "run", "--config", str(path), "--stage", "rft"], capture_output=True, text=True
    )
    assert run.returncode != 0 and "rft run runs every stage" in run.stderr
    check = subprocess.run(
        [*cli, "config", "check", "--config", str(path)], capture_output=True, text=True
    )
    assert check.returncode != 0 and "--stage NAME" in check.stderr
    one = subprocess.run(
        [*cli, "config", "check", "--config", str(path), "--stage", "rft"],
        capture_output=True,
        text=True,
    )
    assert one.returncode == 0, one.stderr[-2000:]


def test_an_override_of_the_stages_list_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, base_config(tmp_path))
    with pytest.raises(ConfigError, match="stages are set in the config file"):
        load_pipeline(path, ["stages[0].mode=both"])
