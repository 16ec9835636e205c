"""examples/agents/make_demonstrations.py: the rows the trainer renders (rft.buffer.expert_source,
with the tools chat template the example config sets) start from exactly the ids the
multiplication_tool workflow feeds the model, and teach the call and then the true product."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rft.buffer.expert_source import ExpertContext, SftRowRenderer
from rft.config.schema import AuxiliaryBufferConfig, FormatConfig
from rft.engines.models import ModelSpec
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig
from rft.environments import split_seeds
from rft.environments.multiplication import Multiplication
from rft.events.models import Task
from rft.tools.chat_templates import tool_chat_template
from rft.workflows import WORKFLOWS
from rft.workflows.model_handle import DirectModelHandle
from rft.workflows.multi_turn import MultiTurnWorkflow

SCRIPT = Path(__file__).parents[2] / "examples" / "agents" / "make_demonstrations.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_demonstrations", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def engine() -> Any:
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))


def test_demonstrations_start_where_the_workflow_starts_and_teach_both_turns(
    script: ModuleType, engine: Any
) -> None:
    tok = engine.tokenizer
    rows = script.demonstrations(tok, 3, start=5)
    seeds = split_seeds("train", 3, start=5)
    assert [r["seed"] for r in rows] == [s for s in seeds for _ in range(2)]
    template = tool_chat_template("smollm2_tools")
    buffer = AuxiliaryBufferConfig(
        path="x", format=FormatConfig(prompt_type="messages", messages_key="messages")
    )
    renderer = SftRowRenderer(buffer, ExpertContext(tok, 4096, 4096, template))
    workflow = WORKFLOWS.get("multiplication_tool")()
    assert isinstance(workflow, MultiTurnWorkflow)
    for seed, call_row, answer_row in zip(seeds, rows[::2], rows[1::2], strict=True):
        task = Task(
            task_id=f"mul-{seed}",
            taskset="mul",
            epoch=0,
            index=0,
            payload={"seed": seed},
            workflow="multiplication_tool",
            format={"chat_template": template, "system_prompt": script.SYSTEM_PROMPT},
        )
        episode = workflow.episode(task, 0)
        fed = DirectModelHandle(engine).chat_ids(
            episode.messages, tools=episode.tools, chat_template=template
        )
        prompt, response = renderer.token_ids(call_row, "row")
        assert prompt == fed, "the demonstration's prompt is the rollout's first prompt"
        env = Multiplication()
        env.reset(seed)
        a, b = env.factors
        said = tok.decode(response)
        call = json.loads(said.split("<tool_call>")[1].split("</tool_call>")[0])
        assert call == {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}
        parsed = episode.parser(said) if episode.parser else None
        assert parsed is not None and parsed.has_calls and episode.executor is not None
        result = episode.executor.execute(parsed.calls[0])
        assert result.content == str(a * b)
        prompt, response = renderer.token_ids(answer_row, "row")
        assert tok.decode(prompt).startswith(tok.decode(fed))
        assert f"<tool_response>\n{a * b}\n</tool_response>" in tok.decode(prompt)
        assert env.step(tok.decode(response)).reward == 1.0


def test_the_agent_example_configs_load_and_evaluate_on_held_out_seeds_only(
    script: ModuleType,
) -> None:
    from rft.catalog import load_config

    root = Path(__file__).parents[2]
    for name, train_workflow, eval_workflows in (
        ("guess_number", "guess_number", {"guess_number"}),
        ("multiplication_tool", "multiplication_tool", {"multiplication_tool", "multiplication"}),
    ):
        cfg = load_config(root / "examples" / "agents" / f"{name}.yaml")
        inputs = cfg.buffer.explorer_input
        assert inputs.taskset is not None
        assert inputs.taskset.default_workflow_type == train_workflow
        assert inputs.taskset.generator_args["split"] == "train"
        assert {t.default_workflow_type for t in inputs.eval_tasksets} == eval_workflows
        assert all(t.generator_args["split"] == "eval" for t in inputs.eval_tasksets)
        assert all("tool_call_reward" not in t.workflow_args for t in inputs.eval_tasksets)
    # the tool example mixes in the demonstrations the script's docstring writes
    aux = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert f"--out {aux.path}" in (SCRIPT.read_text())
    assert cfg.algorithm.sample_strategy == "mix"
    # and its prompts start from the system prompt the demonstrations were written with
    tool_tasksets = [cfg.buffer.explorer_input.taskset, cfg.buffer.explorer_input.eval_tasksets[0]]
    assert all(
        t is not None and t.format.system_prompt == script.SYSTEM_PROMPT for t in tool_tasksets
    )
