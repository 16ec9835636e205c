"""A tool task's oracle is played through its tool workflow and every way it can fail to play
as the workflow's turns is refused with the buffer, seed and turn named; the date_difference
example is one plugin file of at most 60 lines whose config trains on train seeds and evaluates
held-out seeds with and without its tool."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rft.buffer.expert_source import ExpertContext
from rft.catalog import load_config
from rft.config.schema import AuxiliaryBufferConfig, FormatConfig
from rft.engines.models import ModelSpec
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig
from rft.environments import ENVIRONMENTS, EVAL_SEED_START, split_seeds
from rft.environments.tool_task import ToolTask, call
from rft.errors import ConfigError
from rft.producers.generators import TASK_GENERATORS
from rft.tools import TOOLS
from rft.tools.chat_templates import tool_chat_template
from rft.workflows.demonstrations import DemonstrationError, OracleDemonstrations
from rft.workflows.registry import WORKFLOWS
from rft.workflows.tool_tasks import register_tool_task

EXAMPLE = Path(__file__).parents[2] / "examples" / "date_difference"
TEMPLATE = tool_chat_template("smollm2_tools")


@pytest.fixture(autouse=True)
def own_registries(monkeypatch):  # type: ignore[no-untyped-def]
    for registry in (ENVIRONMENTS, WORKFLOWS, TASK_GENERATORS, TOOLS):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny"))).tokenizer


class Double(ToolTask[int]):
    """Twice a seeded number, by the calculator; the oracle is set per test."""

    tools = ("calculator",)

    def __init__(self) -> None:
        self.turns: Any = None

    def problem(self, rng: random.Random) -> int:
        return rng.randint(10, 99)

    def question(self, problem: int, with_tools: bool) -> str:
        return f"What is {problem} * 2?"

    def verdict(self, reply: str, problem: int) -> float:
        return float(reply.strip() == f"Answer: {problem * 2}")

    def oracle(self, problem: int) -> Any:
        return ORACLES[0](problem)


ORACLES: list[Any] = [None]


def source(tokenizer: Any, oracle: Any, **buffer: Any) -> OracleDemonstrations:
    ORACLES[0] = oracle
    if "double" not in WORKFLOWS:
        register_tool_task("double", Double)
    settings = {"path": "double", "name": "demos", "storage_type": "oracle", **buffer}
    settings.setdefault("format", FormatConfig())
    return OracleDemonstrations(
        AuxiliaryBufferConfig(**settings), ExpertContext(tokenizer, 4096, 256, TEMPLATE)
    )


def right(n: int) -> list[Any]:
    return [call("calculator", expression=f"{n} * 2"), f"Answer: {n * 2}"]


def test_a_right_oracle_gives_the_workflows_ids_with_the_models_turns_masked_in(
    tokenizer: Any,
) -> None:
    demos = source(tokenizer, right)
    rows = demos.take(3)
    assert [r.task_id for r in rows] == [f"demos:{s}" for s in split_seeds("train", 3)]
    for row in rows:
        mask = row.action_mask
        assert mask is not None
        said = tokenizer.decode(row.response_ids[mask.astype(bool)])
        heard = tokenizer.decode(row.response_ids[~mask.astype(bool)])
        assert "<tool_call>" in said and "Answer:" in said and "<tool_response>" not in said
        assert "<tool_response>" in heard  # the calculator's real answer, not learned
    demos.restore({"index": 7})
    assert demos.take(1)[0].task_id == f"demos:{split_seeds('train', 1, start=7)[0]}"


@pytest.mark.parametrize(
    ("oracle", "said"),
    [
        (lambda n: [call("calculator", expression=f"{n} * 2"), f"Answer: {n * 3}"], "not solved"),
        (lambda n: [call("calculator", expr="1"), f"Answer: {n * 2}"], "invalid_arguments"),
        (lambda n: [call("calculater", expression="1"), f"Answer: {n * 2}"], "unknown_tool"),
        (lambda n: [call("calculator", expression="1")], "last turn must be the answer"),
        (lambda n: ["Answer: 1", f"Answer: {n * 2}"], "only the oracle's last turn"),
        (lambda n: [call("calculator", expression="1")] * 4 + ["Answer: 2"], "over max_turns"),
        (lambda n: [42, "Answer: 2"], "a turn is a call"),
        (lambda n: None, "has no oracle"),
    ],
)
def test_an_oracle_that_does_not_play_is_refused_where_it_fails(
    tokenizer: Any, oracle: Any, said: str
) -> None:
    seed = split_seeds("train", 1)[0]
    with pytest.raises(DemonstrationError, match=said) as caught:
        source(tokenizer, oracle)
    assert "auxiliary_buffers.demos" in str(caught.value)
    assert f"seed {seed}" in str(caught.value)


def test_a_template_that_drops_tool_calls_or_a_reply_over_max_tokens_is_refused(
    tokenizer: Any,
) -> None:
    plain = FormatConfig(chat_template=tokenizer.chat_template)  # the tiny model's own ChatML
    with pytest.raises(DemonstrationError, match="turn 0: the chat template renders"):
        source(tokenizer, right, format=plain)
    ORACLES[0] = right
    with pytest.raises(DemonstrationError, match="turn 0: the reply is .* over the rollout"):
        OracleDemonstrations(
            AuxiliaryBufferConfig(path="double", storage_type="oracle"),
            ExpertContext(tokenizer, 4096, 16, TEMPLATE),
        )


def test_only_train_seeds_and_only_tool_tasks_are_demonstrated(tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="split: oracle demonstrations play train seeds only"):
        source(tokenizer, right, split="eval")
    with pytest.raises(ConfigError, match="'guess_number' is not a tool task's workflow"):
        source(tokenizer, right, path="guess_number")


def test_the_date_difference_example_is_one_short_plugin_run_with_and_without_its_tool(
    tokenizer: Any,
) -> None:
    lines = (EXAMPLE / "date_difference.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60
    assert not any(
        line.startswith(("from rft.workflows", "from rft.environments")) for line in lines
    )
    cfg = load_config(EXAMPLE / "date_difference.yaml")
    inputs = cfg.buffer.explorer_input
    assert inputs.taskset is not None and inputs.taskset.generator_args["split"] == "train"
    evals = {t.default_workflow_type: t for t in inputs.eval_tasksets}
    assert sorted(evals) == ["date_difference", "date_difference_no_tools"]
    for taskset in evals.values():
        rows = TASK_GENERATORS.get(taskset.path)(**taskset.generator_args).rows
        assert all(r["seed"] >= EVAL_SEED_START for r in rows)
    aux = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert (aux.storage_type, aux.path) == ("oracle", "date_difference")
    # the demonstrations start from the prompt the training rollouts start from
    assert aux.format.system_prompt == inputs.taskset.format.system_prompt
    demos = OracleDemonstrations(aux, ExpertContext(tokenizer, 4096, 256, TEMPLATE))
    (row,) = demos.take(1)
    assert '"name": "days_between"' in tokenizer.decode(row.response_ids)
