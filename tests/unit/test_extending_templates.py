"""Every template on docs/extending.md works: each is cut out of the page, loaded as a plugin of a
config that selects it (names and args checked as for a run), and run on small inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rft.algorithms.advantages import ADVANTAGE_FN
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.sample_strategy import SAMPLE_STRATEGIES, build_sampler
from rft.catalog import load_config
from rft.consumers.metrics.sinks import METRIC_SINKS, SinkContext
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig, SamplingParams
from rft.engines.trainer import TRAINER_ENGINES, TorchTrainerConfig, TrainBatch, TrainerPlacement
from rft.errors import ConfigError
from rft.events.models import Metric, Task
from rft.registry import Registry
from rft.rewards.registry import REWARD_FUNCTIONS
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
        ]
    )


def _task(payload: dict[str, object]) -> Task:
    return Task(task_id="t:0:0", taskset="t", epoch=0, index=0, payload=payload)


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
