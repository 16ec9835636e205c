"""Loading valid configs: the examples, derived defaults, interpolation, overrides, aliases."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
import yaml

from rft.catalog import config_from_dict, load_config
from rft.config import ConfigValidationError, ConfigWarning, RftConfig, StackSettings
from rft.consumers.replay.mirror import mirror_target
from rft.consumers.run_plan import RunPlan
from tests.unit.config_samples import MINIMAL

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_arithmetic_example_loads_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        cfg = load_config(EXAMPLES / "arithmetic.yaml")
    assert cfg.mode == "both"
    assert cfg.model.model_path == "smollm2"
    assert cfg.algorithm.algorithm_type == "grpo"
    assert cfg.algorithm.repeat_times == 8
    assert cfg.buffer.train_batch_size == cfg.buffer.batch_size * 8
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    assert taskset.storage_type == "generator"
    assert taskset.path == "arithmetic"
    assert taskset.default_workflow_type == "math_workflow"
    assert taskset.default_reward_fn_type == "math_reward"
    assert taskset.repeat_times == 8
    assert taskset.generator_args["seed"] == 42
    assert [t.repeat_times for t in cfg.buffer.explorer_input.eval_tasksets] == [1]
    assert isinstance(cfg.stack, StackSettings)
    assert cfg.buffer.trainer_input.max_staleness == 1


@pytest.mark.parametrize(
    ("file", "mode"), [("explorer.yaml", "explore"), ("trainer.yaml", "train")]
)
def test_split_examples_differ_from_the_combined_one_only_in_mode(file: str, mode: str) -> None:
    combined = load_config(EXAMPLES / "arithmetic.yaml")
    split = load_config(EXAMPLES / file)
    assert split.mode == mode
    assert dataclasses.replace(split, mode="both") == combined


def test_derived_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL), ["algorithm.repeat_times=3"])
    assert cfg.buffer.train_batch_size == 12
    assert cfg.model.max_model_len == cfg.model.max_prompt_tokens + cfg.model.max_response_tokens
    assert cfg.algorithm.advantage_fn is None  # the algorithm_type preset decides
    assert cfg.explorer.rollout_model.dtype == cfg.model.dtype
    assert cfg.explorer.runner_num == 8  # engine_num 1 x runner_per_model 8 (the default)
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    assert taskset.repeat_times == 3
    assert taskset.rollout_args.max_tokens == cfg.model.max_response_tokens
    assert cfg.job_dir == Path("./checkpoints") / "p" / "n"


def test_explicit_values_win_over_derived_defaults(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "algorithm.repeat_times=2",
            "buffer.train_batch_size=5",
            "algorithm.advantage_fn=rloo",
            "model.max_model_len=4096",
        ],
    )
    assert cfg.buffer.train_batch_size == 5
    assert cfg.algorithm.advantage_fn == "rloo"
    assert cfg.model.max_model_len == 4096


def test_env_interpolation_with_default_and_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = MINIMAL.replace("batch_size: 4", "batch_size: ${oc.env:RFT_TEST_BATCH,6}")
    text += "checkpoint_root_dir: ${oc.env:RFT_TEST_CKPT,/tmp/default-ckpt}\n"
    path = write(tmp_path, text)
    monkeypatch.delenv("RFT_TEST_BATCH", raising=False)
    monkeypatch.delenv("RFT_TEST_CKPT", raising=False)
    cfg = load_config(path)
    assert cfg.buffer.batch_size == 6  # the env default arrives as text and is read as an int
    assert cfg.checkpoint_root_dir == "/tmp/default-ckpt"
    monkeypatch.setenv("RFT_TEST_BATCH", "9")
    monkeypatch.setenv("RFT_TEST_CKPT", "/data/ckpt")
    cfg = load_config(path)
    assert cfg.buffer.batch_size == 9
    assert cfg.checkpoint_root_dir == "/data/ckpt"


def test_key_interpolation(tmp_path: Path) -> None:
    text = MINIMAL + "trainer:\n  save_interval: ${synchronizer.sync_interval}\n"
    text += "synchronizer:\n  sync_interval: 7\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.trainer.save_interval == 7


def test_overrides_replace_and_add_values(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "algorithm.repeat_times=8",
            "trainer.optim.lr=3e-5",
            "mode=explore",
            "buffer.batch_size=2",
        ],
    )
    assert cfg.algorithm.repeat_times == 8
    assert cfg.trainer.optim.lr == pytest.approx(3e-5)
    assert cfg.mode == "explore"
    assert cfg.buffer.train_batch_size == 16


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("explorer_driven", "dynamic_by_explorer"),
        ("dynamic_by_explorer", "dynamic_by_explorer"),
        ("dynamic_by_trainer", "trainer_driven"),
        ("fully_async", "fully_async"),
    ],
)
def test_sync_style_aliases(tmp_path: Path, given: str, expected: str) -> None:
    cfg = load_config(write(tmp_path, MINIMAL), [f"synchronizer.sync_style={given}"])
    assert cfg.synchronizer.sync_style == expected


def test_carried_over_trinity_yaml_loads_and_warns_about_ignored_keys(tmp_path: Path) -> None:
    text = MINIMAL.replace("algorithm:\n  repeat_times: 2\n", "") + (
        "ray_namespace: trinity\n"
        "algorithm:\n"
        "  algorithm_type: grpo\n"
        "  repeat_times: 4\n"
        "  optimizer:\n"
        "    lr: 2.0e-6\n"
        "    warmup_style: cosine\n"
        "trainer:\n"
        "  trainer_type: verl\n"
        "  trainer_strategy: fsdp\n"
        "  save_hf_checkpoint: last\n"
        "synchronizer:\n"
        "  sync_method: memory\n"
        "monitor:\n"
        "  enable_ray_timeline: false\n"
    )
    text = text.replace(
        "      path: arithmetic\n", "      path: arithmetic\n      enable_progress_bar: true\n"
    )
    with pytest.warns(ConfigWarning) as record:
        cfg = load_config(write(tmp_path, text))
    messages = "\n".join(str(w.message) for w in record)
    for key in (
        "ray_namespace",
        "trainer.trainer_strategy: fsdp",
        "trainer.save_hf_checkpoint",
        "monitor.enable_ray_timeline",
        "buffer.explorer_input.taskset.enable_progress_bar",
    ):
        assert key in messages
    assert "ignored" in messages
    assert cfg.trainer.optim.lr == pytest.approx(2e-6)  # algorithm.optimizer moved to trainer.optim
    assert cfg.trainer.optim.warmup_style == "cosine"
    assert cfg.synchronizer.sync_method == "memory"  # a transport of its own, said nowhere
    assert "sync_method" not in messages
    # veRL's FSDP trainer is rft's FSDP2 engine here, said above
    assert (cfg.trainer.trainer_type, cfg.trainer.trainer_strategy) == ("fsdp2", "fsdp2")
    assert cfg.trainer.engine_name == "fsdp2"
    assert "rft has no veRL workers" in messages


def test_trainer_optim_wins_over_trinity_algorithm_optimizer(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "algorithm:\n", "algorithm:\n  optimizer:\n    lr: 1.0e-3\n    weight_decay: 0.5\n"
    )
    text += "trainer:\n  optim:\n    lr: 1.0e-4\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.trainer.optim.lr == pytest.approx(1e-4)
    assert cfg.trainer.optim.weight_decay == pytest.approx(0.5)


def test_trinity_queue_buffer_is_the_run_topic_and_its_sql_path_never_a_topic(
    tmp_path: Path,
) -> None:
    text = MINIMAL + (
        "  trainer_input:\n    experience_buffer:\n      name: gsm8k_buffer\n"
        "      storage_type: queue\n      path: 'sqlite:///gsm8k.db'\n"
    )
    with pytest.warns(ConfigWarning, match="is not used with storage_type queue"):
        cfg = load_config(write(tmp_path, text))
    plan = RunPlan(cfg)
    assert plan.experience_topic == plan.topics.experiences
    assert mirror_target(cfg) is None


def test_sql_buffer_is_the_run_topic_plus_a_mirror_url(tmp_path: Path) -> None:
    text = MINIMAL + (
        "  trainer_input:\n    experience_buffer:\n"
        "      storage_type: sql\n      path: 'sqlite:///exp.db'\n"
    )
    cfg = load_config(write(tmp_path, text))
    plan = RunPlan(cfg)
    assert plan.experience_topic == plan.topics.experiences
    target = mirror_target(cfg)
    assert target is not None and target.url == "sqlite:///exp.db"


def test_a_path_that_is_not_a_topic_name_never_becomes_one(tmp_path: Path) -> None:
    text = MINIMAL + (
        "  trainer_input:\n    experience_buffer:\n      path: 'sqlite:///gsm8k.db'\n"
    )
    with pytest.raises(
        ConfigValidationError, match="not a legal Kafka topic name.*storage_type: sql"
    ):
        load_config(write(tmp_path, text))
    ok = MINIMAL + "  trainer_input:\n    experience_buffer:\n      path: shared.experiences\n"
    assert RunPlan(load_config(write(tmp_path, ok))).experience_topic == "shared.experiences"


def test_to_yaml_round_trips(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "arithmetic.yaml")
    again = load_config(write(tmp_path, cfg.to_yaml(), "dumped.yaml"))
    assert again == cfg


def test_to_yaml_leaves_out_secrets_unless_asked(tmp_path: Path) -> None:
    text = MINIMAL + "stack:\n  object_store:\n    secret_key: s3cr3t-value\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.stack.object_store.secret_key == "s3cr3t-value"
    assert "s3cr3t-value" not in cfg.to_yaml()
    assert "s3cr3t-value" not in repr(cfg)
    assert "s3cr3t-value" in cfg.to_yaml(include_secrets=True)
    assert load_config(write(tmp_path, cfg.to_yaml(include_secrets=True), "s.yaml")) == cfg


def test_text_that_looks_like_interpolation_round_trips(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    taskset.format.system_prompt = "Reply as ${answer}"
    again = load_config(write(tmp_path, cfg.to_yaml(), "dumped.yaml"))
    assert again == cfg


def test_stack_section_reaches_stack_settings(tmp_path: Path) -> None:
    text = MINIMAL + (
        "stack:\n"
        "  kafka:\n"
        "    bootstrap_servers: broker:9092\n"
        "    partitions: 8\n"
        "  local:\n"
        "    root: /tmp/rft-stack\n"
    )
    cfg = load_config(write(tmp_path, text))
    assert cfg.stack.kafka.bootstrap_servers == "broker:9092"
    assert cfg.stack.kafka.partitions == 8
    assert cfg.stack.local.root == Path("/tmp/rft-stack")
    assert cfg.stack.object_store.bucket == "rft"


def test_train_mode_needs_no_taskset() -> None:
    cfg = config_from_dict(
        {"project": "p", "name": "n", "mode": "train", "model": {"model_path": "tiny"},
         "buffer": {"batch_size": 2}, "algorithm": {"repeat_times": 2}}
    )  # fmt: skip
    assert isinstance(cfg, RftConfig)
    assert cfg.buffer.explorer_input.taskset is None


def test_task_format_map_for_events(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "arithmetic.yaml")
    taskset = cfg.buffer.explorer_input.taskset
    assert taskset is not None
    fmt = taskset.format.as_task_format()
    assert fmt["prompt_key"] == "question"
    raw = yaml.safe_load((EXAMPLES / "arithmetic.yaml").read_text())
    written = raw["buffer"]["explorer_input"]["taskset"]["format"]["system_prompt"]
    assert fmt["system_prompt"] == written
    assert "system_prompt_key" not in fmt  # unset entries are left out
    assert all(isinstance(v, str) for v in fmt.values())
