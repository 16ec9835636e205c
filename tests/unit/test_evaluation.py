"""The evaluation shared by explorers and bench: greedy single rollouts, accuracy per taskset from
the reward's `correct` info, rejected tasks left out, and the eval metric's values."""

from __future__ import annotations

import dataclasses
import math

from rft.config.schema import ModelConfig
from rft.consumers.explorer.evaluation import eval_params, evaluate_tasksets
from rft.events.models import Task
from tests.unit.test_workflows import CannedEngine, make_task


def eval_task(tid: str, taskset: str, question: str, answer: object) -> Task:
    task = make_task(tid, {"question": question, "answer": answer}, is_eval=True)
    return dataclasses.replace(task, taskset=taskset)


def test_accuracy_per_taskset_and_metric_values() -> None:
    engine = CannedEngine(
        {
            "2 + 2": ["Answer: 4"],  # right
            "3 + 3": ["Answer: 7"],  # wrong
            "5 - 1": ["so 4"],  # right
            "9 - 9": ["Answer: 0"],  # right
            "1 - 1": ["no idea"],  # wrong
        }
    )
    tasks = {
        "add": [
            eval_task("a1", "add", "What is 2 + 2?", 4),
            eval_task("a2", "add", "What is 3 + 3?", 6),
        ],
        "sub": [
            eval_task("s1", "sub", "What is 5 - 1?", 4),
            eval_task("s2", "sub", "What is 9 - 9?", 0),
            eval_task("s3", "sub", "What is 1 - 1?", 0),
            # a task its workflow rejects (no answer) is not scored
            eval_task("s4", "sub", "What is 2 - 2?", None),
        ],
    }
    model = ModelConfig(
        model_path="tiny", max_response_tokens=8, repetition_penalty=1.2, min_response_tokens=2
    )
    result = evaluate_tasksets(engine, tasks, eval_params(model), at="version 3")
    assert result.accuracy == {"add": 0.5, "sub": 2 / 3}
    assert result.tasks == {"add": 2, "sub": 3}
    # one greedy rollout per task, one generate call per taskset
    assert [(len(p), params.n, params.temperature) for p, params in engine.calls] == [
        (2, 1, 0.0),
        (3, 1, 0.0),
    ]
    # the model section's sampling limits apply to evaluation as to exploration
    for _, params in engine.calls:
        assert (params.max_tokens, params.repetition_penalty, params.min_tokens) == (8, 1.2, 2)
    values = result.metric_values()
    assert values == {
        "eval/add/accuracy": 0.5,
        "eval/sub/accuracy": 2 / 3,
        "eval_accuracy": (0.5 + 2 / 3) / 2,
        "model_version": 0.0,
    }


def test_no_tasksets_give_no_mean() -> None:
    params = eval_params(ModelConfig(model_path="tiny"))
    result = evaluate_tasksets(CannedEngine({}), {}, params, at="step 0")
    assert result.accuracy == {}
    assert math.isnan(result.metric_values()["eval_accuracy"])
