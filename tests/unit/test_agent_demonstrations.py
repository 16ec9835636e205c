"""examples/agents/make_demonstrations.py: the rows the trainer renders (rft.buffer.expert_source,
with the tools chat template the example config sets) start from exactly the ids the
multiplication_tool workflow feeds the model, and teach the call and then the true product; the
guess_number rows are the conversation the guess_number workflow holds, turn by turn, of a
binary search that wins."""

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
from rft.environments.guess_number import GuessNumber, binary_search_turns
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


def seeded_task(workflow: str, seed: int, fmt: dict[str, str]) -> Task:
    return Task(
        task_id=f"{workflow}-{seed}",
        taskset=workflow,
        epoch=0,
        index=0,
        payload={"seed": seed},
        workflow=workflow,
        format=fmt,
    )


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
        fmt = {"chat_template": template, "system_prompt": script.SYSTEM_PROMPT}
        episode = workflow.episode(seeded_task("multiplication_tool", seed, fmt), 0)
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


def test_guess_number_rows_are_the_workflows_conversation_of_a_winning_binary_search(
    script: ModuleType, engine: Any
) -> None:
    rows = script.guess_number_demonstrations(4, start=3)
    seeds = split_seeds("train", 4, start=3)
    assert sorted({r["seed"] for r in rows}) == sorted(seeds)
    renderer = SftRowRenderer(
        AuxiliaryBufferConfig(
            path="x", format=FormatConfig(prompt_type="messages", messages_key="messages")
        ),
        ExpertContext(engine.tokenizer, 4096, 4096),
    )
    workflow = WORKFLOWS.get("guess_number")()
    assert isinstance(workflow, MultiTurnWorkflow)
    for seed in seeds:
        game = [r["messages"] for r in rows if r["seed"] == seed]
        assert 1 <= len(game) <= binary_search_turns(1, 20)
        fmt = {"system_prompt": script.GUESS_PROMPT, "workflow_args": json.dumps({"high": 20})}
        episode = workflow.episode(seeded_task("guess_number", seed, fmt), 0)
        # the first row starts where the workflow starts, and each row extends the one before
        assert game[0][:-1] == episode.messages
        for before, after in zip(game, game[1:], strict=False):
            assert after[: len(before)] == before
        # replaying the guesses against the environment gives back the rows' feedback and a win
        env = GuessNumber(1, 20)
        env.reset(seed)
        last = game[-1]
        for i, message in enumerate(last[2:]):
            if message["role"] != "assistant":
                continue
            result = env.step(message["content"])
            if i + 3 < len(last):
                assert last[i + 3] == {"role": "user", "content": result.observation}
        assert result.done and result.reward == 1.0
        prompt, response = renderer.token_ids({"messages": last}, "row")
        assert engine.tokenizer.decode(response).strip().startswith(last[-1]["content"])


def test_the_agent_example_configs_load_and_evaluate_on_held_out_seeds_only(
    script: ModuleType,
) -> None:
    from rft.catalog import load_config

    root = Path(__file__).parents[2]
    for name, train_workflow, eval_workflows in (
        ("guess_number", "guess_number", {"guess_number"}),
        ("guess_number_cpu", "guess_number", {"guess_number"}),
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
        if name == "guess_number_cpu":  # its demonstrations, from the script's docstring
            aux = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
            assert f"--task guess_number --out {aux.path}" in SCRIPT.read_text()
            assert inputs.taskset.format.system_prompt == script.GUESS_PROMPT
    # the tool example mixes in the demonstrations the script's docstring writes
    aux = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert f"--out {aux.path}" in (SCRIPT.read_text())
    assert cfg.algorithm.sample_strategy == "mix"
    # and its prompts start from the system prompt the demonstrations were written with
    tool_tasksets = [cfg.buffer.explorer_input.taskset, cfg.buffer.explorer_input.eval_tasksets[0]]
    assert all(
        t is not None and t.format.system_prompt == script.SYSTEM_PROMPT for t in tool_tasksets
    )
