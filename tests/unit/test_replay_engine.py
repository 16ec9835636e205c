"""The `replay` rollout engine: what the hf engine answered, recorded as a JSONL experience export,
comes back token for token through the same workflow; its config section is checked at load."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from rft.catalog import load_config
from rft.config import ConfigValidationError
from rft.consumers.replay.export import EXPORT_FORMATS
from rft.consumers.run_plan import RunPlan
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, SamplingParams, create_rollout_engine
from rft.errors import EngineError
from rft.events.models import Experience, Task
from rft.replay.experience_rows import ExportRow
from rft.workflows.runner import WorkflowResult, run_workflows
from tests.unit.config_samples import MINIMAL

QA = {"prompt_key": "question", "response_key": "answer"}
ARGS = "explorer.rollout_model.engine_args"


def tasks() -> list[Task]:
    questions = [("What is 2 + 2?", 4), ("What is 7 * 6?", 42)]
    return [
        Task(
            task_id=f"t{i}",
            taskset="t",
            epoch=0,
            index=i,
            payload={"question": q, "answer": a},
            format=QA,
            workflow="math_workflow",
            repeat_times=3,
        )
        for i, (q, a) in enumerate(questions)
    ]


def record(results: list[WorkflowResult], path: Path) -> None:
    """The rollouts as Experience rows of a real JSONL export."""
    rows = []
    for result in results:
        for k, rollout in enumerate(result.trajectories):
            exp = Experience(
                experience_id=f"{result.task.task_id}/{k}",
                task_id=result.task.task_id,
                group_id=result.task.task_id,
                group_size=len(result.trajectories),
                explorer_id="recorder",
                model_version=0,
                prompt_ids=rollout.prompt_ids,
                response_ids=rollout.response_ids,
                logprobs=rollout.logprobs,
                reward=rollout.reward,
                response_text=rollout.response_text,
                truncated=rollout.finish_reason == "length",
                logprob_temperature=rollout.logprob_temperature,
            )
            rows.append(ExportRow(exp, "p.n.experiences", 0, len(rows), 0))
    writer = EXPORT_FORMATS.get("jsonl")(str(path), decoded=False, overwrite=True, table="x")
    writer.write(rows)
    writer.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[WorkflowResult]]:
    hf = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=7)
    results = run_workflows(tasks(), hf, params)
    path = tmp_path_factory.mktemp("replay") / "recorded.jsonl"
    record(results, path)
    return path, results


def replay_engine(path: Path):  # type: ignore[no-untyped-def]
    config = RolloutEngineConfig(model=ModelSpec("tiny"), options={"path": str(path)})
    return create_rollout_engine("replay", config)


def test_a_workflow_gets_back_what_was_recorded(
    recorded: tuple[Path, list[WorkflowResult]],
) -> None:
    path, original = recorded
    engine = replay_engine(path)
    params = SamplingParams(temperature=1.0, max_tokens=12)
    for _ in range(2):  # a second run starts again from the first recorded response
        replayed = run_workflows(tasks(), engine, params)
        for got, want in zip(replayed, original, strict=True):
            for a, b in zip(got.trajectories, want.trajectories, strict=True):
                assert a.reward == b.reward
                assert a.response_ids.tolist() == b.response_ids.tolist()
                assert np.array_equal(a.logprobs, b.logprobs)
                assert (a.response_text, a.finish_reason) == (b.response_text, b.finish_reason)


def test_what_a_recording_cannot_answer_is_refused(
    recorded: tuple[Path, list[WorkflowResult]],
) -> None:
    path, original = recorded
    engine = replay_engine(path)
    prompt = original[0].trajectories[0].prompt_ids.tolist()
    with pytest.raises(EngineError, match=r"no recorded response for the prompt starting \[9"):
        engine.generate([[9, 9, 9]], SamplingParams())
    with pytest.raises(EngineError, match="recorded with logprobs at temperature 1.0"):
        engine.generate([prompt], SamplingParams(temperature=0.5))
    (cut,) = engine.generate([prompt], SamplingParams(max_tokens=2))[0]
    assert cut.finish_reason == "length"
    assert cut.response_ids.tolist() == original[0].trajectories[0].response_ids[:2].tolist()
    engine.load_state_dict({}, 5)
    assert engine.model_version == 5 and engine.state_dict() == {}


def test_its_config_section_is_checked_at_load_and_reaches_the_engine(
    tmp_path: Path, recorded: tuple[Path, list[WorkflowResult]]
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(MINIMAL, encoding="utf-8")
    replay = "explorer.rollout_model.engine_type=replay"
    with pytest.raises(ConfigValidationError, match=rf"`{ARGS}.path` is required by engine_type"):
        load_config(config, [replay])
    with pytest.raises(ConfigValidationError, match=rf"`{ARGS}.path` .*cannot read"):
        load_config(config, [replay, f"{ARGS}.path={tmp_path / 'missing.jsonl'}"])
    with pytest.raises(ConfigValidationError, match=rf"`{ARGS}.seed` is not read by engine"):
        load_config(config, [replay, f"{ARGS}.path={recorded[0]}", f"{ARGS}.seed=1"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(config, [replay, f"{ARGS}.path={recorded[0]}"])
    options = RunPlan(cfg).rollout_engine_config().options
    assert options["path"] == str(recorded[0])
