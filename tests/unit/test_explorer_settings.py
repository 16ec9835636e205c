"""The explorer's settings from the config: env_vars set before torch starts, sampling and step
limits filled from the model and explorer sections, and chat templates checked and applied."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from rft.catalog import load_config
from rft.config import RftConfig
from rft.consumers.explorer.explorer import Explorer
from rft.errors import ConfigError
from tests.unit.config_samples import MINIMAL
from tests.unit.test_workflows import CannedEngine

TEMPLATE = "{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}#"
CHAT = [{"role": "user", "content": "hi"}]


def config(tmp_path: Path, values: dict[str, Any] | None = None) -> RftConfig:
    """MINIMAL with `values` (dotted keys) set in the YAML itself, where Jinja text needs no
    dotlist quoting."""
    raw = yaml.safe_load(MINIMAL)
    for dotted, value in (values or {}).items():
        *parents, leaf = dotted.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="torch's default is already 1 thread")
def test_explore_command_sets_env_vars_before_torch_starts(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        MINIMAL + "explorer:\n  env_vars:\n    OMP_NUM_THREADS: '1'\n    RFT_TEST_MARK: here\n"
    )
    script = textwrap.dedent(
        f"""
        import os, sys
        from rft.cli.explore_cmd import load_explorer_config
        load_explorer_config({str(path)!r}, [])
        from rft.consumers.explorer.explorer import Explorer
        import torch
        print(torch.get_num_threads(), os.environ["RFT_TEST_MARK"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RFT_TEST_MARK")}
    env["PYTHONPATH"] = os.getcwd()
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1", "here"]


def test_sampling_and_step_limits_come_from_the_config(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        {
            "model.repetition_penalty": 1.3,
            "model.min_response_tokens": 5,
            "model.max_prompt_tokens": 100,
            "model.max_response_tokens": 50,
            "model.max_model_len": 150,
            "model.enable_prompt_truncation": False,
            "explorer.runner_per_model": 3,
            "explorer.max_timeout": 12.5,
            "explorer.max_retry_times": 4,
        },
    )
    explorer = Explorer(cfg, engine=CannedEngine({}))
    params = explorer._base_params(step=2)
    assert (params.repetition_penalty, params.min_tokens) == (1.3, 5)
    limits = explorer._step_limits()
    assert (limits.runner_per_model, limits.max_timeout, limits.max_retry_times) == (3, 12.5, 4)
    assert limits.prompts is not None
    assert (limits.prompts.max_prompt_tokens, limits.prompts.max_model_len) == (100, 150)
    assert limits.prompts.truncate is False
    assert Explorer(config(tmp_path), engine=CannedEngine({}))._step_limits().runner_per_model == 8


def configured(cfg: RftConfig) -> CannedEngine:
    engine = CannedEngine({})
    Explorer(cfg, engine=engine)._configure_chat(engine)
    return engine


def test_custom_chat_template_and_enable_thinking_reach_the_engine(tmp_path: Path) -> None:
    thinking = TEMPLATE.replace("#", "{% if enable_thinking %}T{% endif %}#")
    engine = configured(
        config(
            tmp_path,
            {
                "model.custom_chat_template": thinking,
                "explorer.rollout_model.enable_thinking": True,
            },
        )
    )
    assert engine.tokenizer.decode(engine.chat_prompt_ids(CHAT)) == "<user:hi>T#"
    file = tmp_path / "template.jinja"
    file.write_text(TEMPLATE)
    engine = configured(config(tmp_path, {"model.chat_template_path": str(file)}))
    assert engine.tokenizer.decode(engine.chat_prompt_ids(CHAT)) == "<user:hi>#"
    untouched = configured(config(tmp_path))
    assert untouched.tokenizer.decode(untouched.chat_prompt_ids(CHAT)).startswith("<|im_start|>")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"model.chat_template_path": "/nonexistent/t.jinja"},
            "model.chat_template_path: cannot read /nonexistent/t.jinja",
        ),
        ({"model.custom_chat_template": "{% for %}"}, "model.custom_chat_template: cannot apply"),
        (
            {"model.custom_chat_template": "x", "model.chat_template_path": "/t.jinja"},
            "are both set",
        ),
        (
            {"buffer.explorer_input.taskset.format.chat_template": "{% if %}"},
            "buffer.explorer_input.taskset.format.chat_template: cannot apply",
        ),
    ],
    ids=["missing-file", "bad-syntax", "both", "bad-taskset-template"],
)
def test_bad_chat_template_settings_name_their_key(tmp_path: Path, values, message) -> None:
    with pytest.raises(ConfigError, match=message):
        configured(config(tmp_path, values))
