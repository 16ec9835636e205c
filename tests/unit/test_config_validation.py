"""Invalid configs: each error names the key path, the place (file:line or override) and the fix."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError, ConfigWarning
from rft.engines.rollout import ROLLOUT_ENGINES
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides)
    return info.value


def test_wrong_type_names_key_file_line_given_and_expected(tmp_path: Path) -> None:
    text = MINIMAL.replace("batch_size: 4", "batch_size: four")
    err = error_for(tmp_path, text)
    assert isinstance(err, ConfigValidationError)
    message = str(err)
    assert "`buffer.batch_size`" in message
    assert f"{tmp_path / 'run.yaml'}:8" in message  # batch_size is on line 8
    assert "'four'" in message
    assert "an integer" in message
    assert "buffer.batch_size" in [p.path for p in err.problems]


def test_out_of_range(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "trainer:\n  optim:\n    lr: -0.1\n")
    message = str(err)
    assert "`trainer.optim.lr`" in message
    assert "> 0" in message
    assert "-0.1" in message
    assert "run.yaml:17" in message


def test_out_of_range_in_a_list_names_the_index(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "trainer:\n  optim:\n    betas: [0.9, 1.5]\n")
    assert "`trainer.optim.betas[1]`" in str(err)
    assert "< 1" in str(err)


def test_unknown_enum_value_lists_allowed_values_and_suggests(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "mode: explor\n")
    message = str(err)
    assert "`mode`" in message
    assert "'both', 'explore', 'train', 'bench'" in message
    assert "did you mean 'explore'?" in message
    assert "run.yaml:15" in message


def test_unknown_key_warns_with_suggestion_and_is_ignored(tmp_path: Path) -> None:
    text = MINIMAL + "explorer:\n  eval_intervall: 8\n"
    with pytest.warns(ConfigWarning) as record:
        cfg = load_config(write(tmp_path, text))
    (warning,) = [w for w in record if "eval_intervall" in str(w.message)]
    message = str(warning.message)
    assert "`explorer.eval_intervall`" in message
    assert "did you mean `eval_interval`?" in message
    assert "run.yaml:16" in message
    assert cfg.explorer.eval_interval == 100


def test_unknown_top_level_section_warns(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match="did you mean `trainer`"):
        load_config(write(tmp_path, MINIMAL + "trainr:\n  save_interval: 3\n"))


def test_missing_required_keys(tmp_path: Path) -> None:
    text = MINIMAL.replace("  model_path: tiny\n", "  max_prompt_tokens: 12\n")
    text = text.replace("project: p\n", "")
    err = error_for(tmp_path, text)
    assert isinstance(err, ConfigValidationError)
    paths = {p.path for p in err.problems}
    assert paths == {"project", "model.model_path"}
    assert "is required" in str(err)


def test_missing_section_with_required_key(tmp_path: Path) -> None:
    err = error_for(tmp_path, "project: p\nname: n\nmodel:\n  model_path: tiny\n")
    assert isinstance(err, ConfigValidationError)
    assert "buffer.batch_size" in [p.path for p in err.problems]


def test_missing_taskset_in_explore_mode(tmp_path: Path) -> None:
    text = (
        "project: p\nname: n\nmode: explore\nmodel:\n  model_path: tiny\nbuffer:\n  batch_size: 2\n"
    )
    err = error_for(tmp_path, text)
    assert "`buffer.explorer_input.taskset`" in str(err)
    assert "'explore'" in str(err)


def test_taskset_without_workflow(tmp_path: Path) -> None:
    text = MINIMAL.replace("    default_workflow_type: math_workflow\n", "")
    err = error_for(tmp_path, text)
    assert "`buffer.explorer_input.taskset.default_workflow_type`" in str(err)


def test_required_marker_value(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL.replace("model_path: tiny", "model_path: ???"))
    assert "`model.model_path`" in str(err)
    assert "is required" in str(err)
    assert "run.yaml:6" in str(err)


def test_env_var_missing_without_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RFT_TEST_UNSET_VAR", raising=False)
    text = MINIMAL.replace("model_path: tiny", "model_path: ${oc.env:RFT_TEST_UNSET_VAR}")
    err = error_for(tmp_path, text)
    assert "`model.model_path`" in str(err)
    assert "RFT_TEST_UNSET_VAR" in str(err)
    assert "run.yaml:6" in str(err)


def test_bad_override_value_names_the_override(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL, ("algorithm.repeat_times=many",))
    message = str(err)
    assert "`algorithm.repeat_times`" in message
    assert "override 'algorithm.repeat_times=many'" in message


def test_override_without_equals_sign(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL, ("algorithm.repeat_times",))
    assert "key.path=value" in str(err)


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    err = error_for(
        tmp_path,
        MINIMAL,
        ("buffer.batch_size=0", "synchronizer.sync_interval=0", "trainer.grad_clip=0"),
    )
    assert isinstance(err, ConfigValidationError)
    assert {p.path for p in err.problems} == {
        "buffer.batch_size",
        "synchronizer.sync_interval",
        "trainer.grad_clip",
    }
    assert str(err).startswith("3 problems in the config")


def test_sync_method_names_a_weight_transport_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "sync.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    for method in ("checkpoint", "nccl", "memory"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConfigWarning)  # memory is no longer read as nccl
            cfg = load_config(path, [f"synchronizer.sync_method={method}"])
        assert cfg.synchronizer.sync_method == method
    with pytest.raises(ConfigError, match=r"synchronizer.sync_method.*'memry'.*did you mean"):
        load_config(path, ["synchronizer.sync_method=memry"])
    with pytest.raises(ConfigError, match="synchronizer.weight_group_timeout"):
        load_config(path, ["synchronizer.weight_group_timeout=0"])


def test_serve_mode_loads_with_its_section_and_checks_what_the_server_acts_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rft.consumers.run_plan import RunPlan
    from rft.consumers.serve.server import api_key_of, settings_of

    path = write(tmp_path, MINIMAL)
    cfg = load_config(path, ["mode=serve", "explorer.serve.max_sessions=3"])
    assert cfg.mode == "serve" and cfg.explorer.serve.max_sessions == 3
    assert cfg.explorer.serve.host == "127.0.0.1"  # localhost unless configured
    assert "api_key" not in cfg.to_dict()["explorer"]["serve"]  # a secret, left out
    monkeypatch.delenv("RFT_SERVE_API_KEY", raising=False)
    assert api_key_of(cfg) is None
    monkeypatch.setenv("RFT_SERVE_API_KEY", "from-env")
    assert api_key_of(cfg) == "from-env"
    monkeypatch.delenv("RFT_SERVE_API_KEY")
    open_to_all = load_config(path, ["mode=serve", "explorer.serve.host=0.0.0.0"])
    with pytest.raises(ConfigError, match="explorer.serve.host: '0.0.0.0' is reachable"):
        api_key_of(open_to_all)
    settings = settings_of(cfg, RunPlan(cfg), "srv")
    assert settings.limits.max_completion_tokens == cfg.model.max_response_tokens
    assert settings.group_size == cfg.algorithm.repeat_times
    err = error_for(tmp_path, MINIMAL, ("explorer.rollout_model.tool_call_parser=hermez",))
    assert "`explorer.rollout_model.tool_call_parser`" in str(err)


def test_enable_openai_api_is_warned_about_truthfully(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match="`mode: serve` serves the endpoint over HTTP"):
        load_config(write(tmp_path, MINIMAL), ["explorer.rollout_model.enable_openai_api=true"])


def test_token_limits_must_fit_the_model_length(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL, ("model.max_model_len=100", "model.max_prompt_tokens=200"))
    assert "`model.max_prompt_tokens`" in str(err)
    assert "max_model_len (100)" in str(err)


def test_duplicate_taskset_names(tmp_path: Path) -> None:
    text = MINIMAL + (
        "    eval_tasksets:\n"
        "      - name: train\n"
        "        storage_type: generator\n"
        "        path: arithmetic\n"
    )
    err = error_for(tmp_path, text)
    assert "`buffer.explorer_input.eval_tasksets[0].name`" in str(err)
    assert "run.yaml:16" in str(err)


def test_bad_eval_taskset_entry_names_its_index(tmp_path: Path) -> None:
    text = MINIMAL + (
        "    eval_tasksets:\n      - name: ev\n        storage_type: sql\n        path: x\n"
    )
    err = error_for(tmp_path, text)
    assert "`buffer.explorer_input.eval_tasksets[0].storage_type`" in str(err)
    assert "'file', 'generator'" in str(err)
    assert "run.yaml:17" in str(err)


def test_section_given_as_scalar(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "trainer: fast\n")
    assert "`trainer`" in str(err)
    assert "a mapping" in str(err)


def test_bool_must_be_boolean_like(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "continue_from_checkpoint: maybe\n")
    assert "`continue_from_checkpoint`" in str(err)
    assert "true or false" in str(err)


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    err = error_for(tmp_path, MINIMAL + "trainer:\n  save_interval: [1, 2\n")
    assert "run.yaml:" in str(err)
    assert "not valid YAML" in str(err)


def test_top_level_list_is_rejected(tmp_path: Path) -> None:
    err = error_for(tmp_path, "- a\n- b\n")
    assert "mapping" in str(err)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")


def test_rollout_engines_without_an_implementation_are_refused_at_load(tmp_path: Path) -> None:
    for engine in ("sglang",):
        err = error_for(tmp_path, MINIMAL, (f"explorer.rollout_model.engine_type={engine}",))
        assert "`explorer.rollout_model.engine_type`" in str(err)
        assert f"known: {', '.join(ROLLOUT_ENGINES.names())}" in str(err)
        assert engine not in ROLLOUT_ENGINES


def test_rollout_max_tokens_may_not_exceed_max_response_tokens(tmp_path) -> None:
    import yaml

    example = Path(__file__).parents[2] / "examples" / "arithmetic" / "arithmetic.yaml"
    raw = yaml.safe_load(example.read_text())
    raw["buffer"]["explorer_input"]["taskset"]["rollout_args"]["max_tokens"] = 64
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"taskset\.rollout_args\.max_tokens.*64 exceeds"):
        load_config(path)
