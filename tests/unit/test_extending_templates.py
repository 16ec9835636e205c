"""Every template on docs/extending.md works: each is cut out of the page, loaded as a plugin of a
config that selects it (names and args checked as for a run), and run on small inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.buffer.expert_source import ExpertContext
from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.sample_strategy import SAMPLE_STRATEGIES, build_sampler
from rft.catalog import load_config
from rft.config.schema import AuxiliaryBufferConfig, FormatConfig
from rft.consumers.metrics.sinks import METRIC_SINKS, SinkContext
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig, SamplingParams
from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainBatch, TrainerPlacement
from rft.environments import ENVIRONMENTS, EVAL_SEED_START
from rft.errors import ConfigError
from rft.events.models import Metric, Task
from rft.producers.generators import TASK_GENERATORS
from rft.registry import Registry
from rft.rewards.registry import REWARD_FUNCTIONS
from rft.tools import TOOLS, ToolCall, ToolExecutor
from rft.tools.chat_templates import tool_chat_template
from rft.tracing.setup import SPAN_EXPORTERS, configure_tracing
from rft.workflows.demonstrations import OracleDemonstrations
from rft.workflows.model_handle import DirectModelHandle
from rft.workflows.registry import WORKFLOWS
from tests.unit.config_samples import MINIMAL

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
TEMPLATE = re.compile(r"<!-- template: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
REGISTRIES: tuple[Registry, ...] = (
    WORKFLOWS,
    REWARD_FUNCTIONS,
    ADVANTAGE_FN,
    POLICY_LOSS_FN,
    SAMPLE_STRATEGIES,
    ROLLOUT_ENGINES,
    TRAINER_ENGINES,
    METRIC_SINKS,
    ENVIRONMENTS,
    TASK_GENERATORS,
    TOOLS,
    SPAN_EXPORTERS,
)


def templates() -> dict[str, str]:
    return dict(TEMPLATE.findall(PAGE.read_text(encoding="utf-8")))


@pytest.fixture(autouse=True)
def own_registries(monkeypatch):  # type: ignore[no-untyped-def]
    """What a template registers is gone after its test, so other tests see the registries as
    rft ships them."""
    for registry in REGISTRIES:
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))


def load_with(tmp_path: Path, template: str, *overrides: str) -> None:
    """Write the template as a plugin file and load a config that selects it (`overrides`)."""
    (tmp_path / f"{template}_part.py").write_text(templates()[template], encoding="utf-8")
    run = tmp_path / "run.yaml"
    run.write_text(f"{MINIMAL}plugins: [{template}_part.py]\n", encoding="utf-8")
    load_config(run, overrides)


def test_the_page_shows_one_template_per_part() -> None:
    assert sorted(templates()) == sorted(
        [
            "workflow",
            "reward",
            "advantage",
            "loss",
            "sampler",
            "rollout_engine",
            "trainer_engine",
            "metric_sink",
            "environment",
            "tool_task",
            "tool",
            "trace_exporter",
        ]
    )


def _task(
    payload: dict[str, object], workflow: str = "", fmt: dict[str, str] | None = None
) -> Task:
    return Task(
        task_id="t:0:0",
        taskset="t",
        epoch=0,
        index=0,
        payload=payload,
        workflow=workflow,
        format=fmt or {},
    )


@pytest.fixture(scope="module")
def tiny_engine():  # type: ignore[no-untyped-def]
    return ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))


def test_workflow_template(tmp_path: Path) -> None:
    load_with(tmp_path, "workflow", "buffer.explorer_input.default_workflow_type=short_answer")
    workflow = WORKFLOWS.get("short_answer")()
    task = _task({"prompt": "What is 2 + 3?", "response": "5"})
    chat = workflow.messages(task)
    assert chat[0] == {"role": "system", "content": "You answer in one line."}
    assert chat[1]["content"].startswith("What is 2 + 3?")
    assert chat[1]["content"].endswith("Give only the final answer.")
    assert workflow.score(task, "5")[0] == 1.0
    assert workflow.score(task, "6")[0] == 0.0
    assert workflow.check_payload({"prompt": "What is 2 + 3?"}, {}) is not None


def test_reward_template(tmp_path: Path) -> None:
    load_with(tmp_path, "reward", "buffer.explorer_input.default_reward_fn_type=last_number")
    reward = REWARD_FUNCTIONS.get("last_number")
    assert reward("3 + 4 = 7", {"answer": "7"}) == (1.0, {"answered": 1.0})
    assert reward("it is 8", {"answer": 7}, wrong_reward=-1.0) == (-1.0, {"answered": 1.0})
    assert reward("no idea", {"answer": 7}) == (0.0, {"answered": 0.0})


def test_advantage_template(tmp_path: Path) -> None:
    load_with(
        tmp_path,
        "advantage",
        "algorithm.advantage_fn=centered_advantage",
        "algorithm.advantage_fn_args.scale=3.0",
    )
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 0, 7, 7, 7])
    advantages, metrics = ADVANTAGE_FN.get("centered_advantage")(rewards, groups, scale=3.0)
    assert torch.allclose(advantages, torch.tensor([2.0, -1.0, -1.0, 0.0, 0.0, 0.0]))
    assert metrics["advantage_abs_mean"] == pytest.approx(4.0 / 6.0)


def test_advantage_template_args_are_checked_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="scal"):
        load_with(
            tmp_path,
            "advantage",
            "algorithm.advantage_fn=centered_advantage",
            "algorithm.advantage_fn_args.scal=2",
        )


def test_loss_template(tmp_path: Path) -> None:
    load_with(
        tmp_path,
        "loss",
        "algorithm.policy_loss_fn=capped_pg",
        "algorithm.policy_loss_fn_args.ratio_cap=2.0",
    )
    logprob = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]])).requires_grad_()
    old = torch.log(torch.tensor([[0.5, 0.05], [0.5, 0.5]]))
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, metrics = POLICY_LOSS_FN.get("capped_pg")(logprob, old, advantages, mask, ratio_cap=2.0)
    loss.backward()
    # the second token's ratio 5 is capped at 2; the masked-out token gets no gradient
    assert metrics["ratio_mean"] == pytest.approx((1.0 + 2.0 + 1.0) / 3)
    assert logprob.grad is not None and logprob.grad[1, 1] == 0.0
    assert logprob.grad[0, 1] == pytest.approx(-2.0 / 3)


def test_sampler_template(tmp_path: Path) -> None:
    load_with(
        tmp_path,
        "sampler",
        "algorithm.sample_strategy=fresh_groups",
        "algorithm.sample_strategy_args.max_staleness=2",
    )
    sampler = build_sampler("fresh_groups", {"max_staleness": 2}, SamplerSetup(train_batch_size=4))
    assert sampler.filter_groups is True
    assert sampler.staleness.max_staleness == 2


def test_rollout_engine_template(tmp_path: Path) -> None:
    load_with(tmp_path, "rollout_engine", "explorer.rollout_model.engine_type=wrapped_hf")
    engine = ROLLOUT_ENGINES.get("wrapped_hf")(RolloutEngineConfig(model=ModelSpec("tiny")))
    out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, n=2, seed=1))
    assert len(out) == 1 and len(out[0]) == 2
    assert all(1 <= len(r.response_ids) == len(r.logprobs) <= 4 for r in out[0])
    engine.load_state_dict(engine.state_dict(), 3)
    assert engine.model_version == 3


def test_trainer_engine_template(tmp_path: Path) -> None:
    load_with(tmp_path, "trainer_engine", "trainer.trainer_type=timed_torch")
    model, tokenizer = load_model(ModelSpec("tiny"))
    engine = TRAINER_ENGINES.get("timed_torch")(
        model, tokenizer, TorchTrainerConfig(lr=1e-3), TrainerPlacement()
    )
    batch = TrainBatch(
        prompt_ids=[[5, 6, 7]],
        response_ids=[[8, 9]],
        old_logprobs=[[0.0, 0.0]],
        action_mask=[[1, 1]],
        advantages=torch.tensor([1.0]),
    )

    def loss_fn(logprob, entropy, tensors):  # type: ignore[no-untyped-def]
        mask = tensors.action_mask
        return -(logprob * mask).sum() / mask.sum(), {}

    metrics = engine.train_step(batch, loss_fn)
    assert engine.step == 1
    assert metrics["engine_step_s"] > 0
    with pytest.raises(ConfigError, match="world_size"):
        TRAINER_ENGINES.get("timed_torch")(
            model, tokenizer, TorchTrainerConfig(), TrainerPlacement(("cpu", "cpu"))
        )


def test_metric_sink_template(tmp_path: Path) -> None:
    load_with(
        tmp_path, "metric_sink", "monitor.monitor_type=[csv]", "monitor.monitor_args.csv.path=x.csv"
    )
    with pytest.raises(ConfigError, match="pth"):
        load_with(
            tmp_path, "metric_sink", "monitor.monitor_type=[csv]", "monitor.monitor_args.csv.pth=x"
        )
    sink = METRIC_SINKS.get("csv")(SinkContext(tmp_path / "monitor", "p", "n"))
    sink.write(Metric(component="trainer", run="p.n", step=2, values={"loss": 0.5}, timestamp=9))
    sink.flush()
    sink.close()
    rows = (tmp_path / "monitor" / "metrics.csv").read_text(encoding="utf-8").splitlines()
    assert rows == ["trainer,2,9,loss,0.5"]


TASKSET = "buffer.explorer_input.taskset"


def test_environment_template(tmp_path: Path, tiny_engine) -> None:  # type: ignore[no-untyped-def]
    chosen = (f"{TASKSET}.path=spell_backwards", f"{TASKSET}.default_workflow_type=spell_backwards")
    load_with(tmp_path, "environment", *chosen, f"{TASKSET}.workflow_args.rounds=2")
    with pytest.raises(ConfigError, match="round"):  # its settings are checked at load
        load_with(tmp_path, "environment", *chosen, f"{TASKSET}.workflow_args.round=2")
    env = ENVIRONMENTS.get("spell_backwards")(rounds=2)
    first = env.reset(7)
    assert env.reset(7) == first  # a seed names one instance
    word = first.rsplit(" ", 1)[1]
    right = env.step(word[::-1])
    assert (right.reward, right.done) == (0.5, False) and "next word" in right.observation
    wrong = env.step("no")
    assert (wrong.reward, wrong.done) == (0.0, True)
    rows = TASK_GENERATORS.get("spell_backwards")(split="eval", num_tasks=3).rows
    assert [r["seed"] for r in rows] == [EVAL_SEED_START + i for i in range(3)]
    # one episode played by the workflow of the same name against a tiny random model
    workflow = WORKFLOWS.get("spell_backwards")()
    task = _task(rows[0], "spell_backwards", {"workflow_args": '{"rounds": 2}'})
    params = SamplingParams(max_tokens=4, seed=1)
    (played,) = workflow.run(task, DirectModelHandle(tiny_engine), params, 0)
    assert played.metrics["turns"] == 2  # every reply is answered until the rounds run out
    assert 0.0 <= played.reward <= 1.0
    assert played.action_mask.any() and not played.action_mask.all()


def test_tool_task_template(tmp_path: Path, tiny_engine) -> None:  # type: ignore[no-untyped-def]
    aux = "buffer.trainer_input.auxiliary_buffers.sft_dataset"
    load_with(
        tmp_path,
        "tool_task",
        f"{TASKSET}.path=unit_conversion",
        f"{TASKSET}.default_workflow_type=unit_conversion",
        f"{TASKSET}.workflow_args.largest=50",
        "algorithm.sample_strategy=mix",
        f"{aux}.storage_type=oracle",
        f"{aux}.path=unit_conversion",
    )
    rows = TASK_GENERATORS.get("unit_conversion")(num_tasks=2).rows
    template = tool_chat_template("smollm2_tools")
    fmt = {"chat_template": template}
    with_tools = WORKFLOWS.get("unit_conversion")().episode(
        _task(rows[0], "unit_conversion", fmt), 0
    )
    baseline = WORKFLOWS.get("unit_conversion_no_tools")()
    without = baseline.episode(_task(rows[0], "unit_conversion_no_tools", fmt), 0)
    assert [t["function"]["name"] for t in with_tools.tools] == ["calculator"]
    assert (without.tools, without.max_turns) == ([], 1)  # the same problem, no tool offered
    assert (
        with_tools.messages[-1]["content"].split("?")[0]
        == without.messages[-1]["content"].split("?")[0]
    )
    # the oracle's demonstrations, rendered and checked by rft through the tool workflow
    source = OracleDemonstrations(
        AuxiliaryBufferConfig(
            path="unit_conversion", name="sft", storage_type="oracle", format=FormatConfig()
        ),
        ExpertContext(tiny_engine.tokenizer, 4096, 256, template),  # a byte tokenizer
    )
    shown = source.take(2)
    tok = tiny_engine.tokenizer
    for row in shown:
        said = tok.decode(row.response_ids)
        assert "<tool_call>" in said and "<tool_response>" in said and "Answer: " in said
        mask = row.action_mask
        assert mask is not None and mask.any() and not mask.all()  # tool tokens are not learned
    assert source.state() == {"index": 2}
    # and one episode against a tiny random model: it answers, or calls badly, and is judged
    task = _task(rows[1], "unit_conversion", fmt)
    (played,) = WORKFLOWS.get("unit_conversion")().run(
        task, DirectModelHandle(tiny_engine), SamplingParams(max_tokens=8, seed=3), 0
    )
    assert 1 <= played.metrics["turns"] <= 3 and played.reward in (0.0, 1.0)


def test_tool_template(tmp_path: Path) -> None:
    load_with(
        tmp_path,
        "tool",
        "buffer.explorer_input.default_workflow_type=tool_call_workflow",
        f"{TASKSET}.workflow_args.tools=[letter_count]",
    )
    executor = ToolExecutor.offering(["letter_count"])
    counted = executor.execute(
        ToolCall("letter_count", '{"word": "Strawberry", "letter": "r"}', "c")
    )
    assert (counted.outcome, counted.content) == ("ok", "3")
    bad = executor.execute(ToolCall("letter_count", '{"word": "x", "letter": "ab"}', "c"))
    assert bad.outcome == "tool_error" and "one character" in bad.content
    schema = TOOLS.get("letter_count").parameters
    assert schema["required"] == ["word", "letter"]
    assert schema["properties"]["letter"]["description"] == "One letter"
    # a workflow that offers tools by workflow_args offers it
    task = _task(
        {"prompt": "How many r in strawberry?", "response": "3"},
        "tool_call_workflow",
        {"workflow_args": '{"tools": ["letter_count"]}'},
    )
    episode = WORKFLOWS.get("tool_call_workflow")().episode(task, 0)
    assert [t["function"]["name"] for t in episode.tools] == ["letter_count"]


def test_trace_exporter_template(tmp_path: Path) -> None:
    target = tmp_path / "spans.txt"
    load_with(
        tmp_path,
        "trace_exporter",
        "monitor.trace_exporter=span_names",
        f"monitor.trace_args.path={target}",
    )
    with pytest.raises(ConfigError, match="pth"):
        load_with(
            tmp_path,
            "trace_exporter",
            "monitor.trace_exporter=span_names",
            "monitor.trace_args.pth=x",
        )
    provider = configure_tracing(
        "test", "span_names", options={"path": str(target)}, install_global=False
    )
    with provider.get_tracer("t").start_as_current_span("explorer.turn"):
        pass
    provider.shutdown()
    (line,) = target.read_text(encoding="utf-8").splitlines()
    name, took = line.split("\t")
    assert name == "explorer.turn" and took.endswith(" ms") and float(took[:-3]) >= 0
