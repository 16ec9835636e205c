"""Responses of zero length and responses cut at max_tokens, from the rollout to the optimizer step.

A model may answer nothing: an OpenAI-compatible server's empty completion, or a generation out of
time before its first token. Such an experience must be written, read back and trained: its reward
still counts in its group's advantages, and it adds no token to the loss. A response that runs to
`max_tokens` is marked truncated and trained whole. Real tiny model, real codec, real engine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rft.algorithms.objective import Advantages, build_loss
from rft.algorithms.presets import resolve_algorithm
from rft.buffer.sampler import BatchRow
from rft.catalog import load_config
from rft.consumers.explorer.explorer import Explorer
from rft.consumers.trainer.train_step import train_batch_of
from rft.engines.models import ModelSpec, load_model
from rft.engines.rollout import HFRolloutEngine, Rollout, SamplingParams
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine, TrainBatch
from rft.events.codec import EventCodec
from rft.events.models import Experience, Task
from rft.workflows.runner import WorkflowResult, run_workflows
from rft.workflows.trajectory import Trajectory
from tests.unit.config_samples import MINIMAL

CODEC = EventCodec.default()


def task(tid: str = "t1") -> Task:
    return Task(
        task_id=tid,
        taskset="arithmetic",
        epoch=0,
        index=0,
        payload={"question": "What is 3 + 4?", "answer": 7},
        format={"prompt_key": "question", "response_key": "answer"},
        workflow="math_workflow",
        repeat_times=2,
    )


@pytest.fixture
def explorer(tmp_path: Path) -> Explorer:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    model, tok = load_model(ModelSpec("tiny", seed=3))
    return Explorer(load_config(path), explorer_id="x", engine=HFRolloutEngine(model, tok))


def round_trip(exps: list[Experience]) -> list[Experience]:
    return [CODEC.decode(CODEC.encode(e)) for e in exps]  # type: ignore[misc]


def test_an_empty_response_is_written_read_back_and_trains_no_token(explorer: Explorer) -> None:
    prompt = np.array([5, 6, 7, 8], dtype=np.int32)
    full = np.array([9, 10, 11], dtype=np.int32)
    empty = Rollout(prompt, np.zeros(0, np.int32), np.zeros(0, np.float32), "", "stop", 1.0)
    answered = Rollout(prompt, full, np.full(3, -1.5, np.float32), "x", "stop", 1.0)
    replies = [Trajectory.of_reply(empty), Trajectory.of_reply(answered)]
    result = WorkflowResult(task(), [replies[0].scored(0.0, {}), replies[1].scored(1.0, {})])
    exps = round_trip(explorer._experiences(result, version=0))
    assert [e.response_length for e in exps] == [0, 3]
    assert exps[0].truncated is False and exps[0].response_text == ""

    # its reward counts in the group: GRPO gives -1 and +1 to rewards 0 and 1 (population std)
    spec = resolve_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    model, tok = load_model(ModelSpec("tiny", dtype="float64", seed=5))
    twin, _ = load_model(ModelSpec("tiny", dtype="float64", seed=5))
    engine = TorchTrainerEngine(
        model, TorchTrainerConfig(lr=1e-2, micro_batch_size=4, weight_decay=0.0), tokenizer=tok
    )
    batch = train_batch_of([BatchRow(e, None, 1, False) for e in exps])
    assert list(batch.action_mask[0]) == [0]  # one placeholder token, never trained

    # the step equals a step on the answered row alone, at its advantage: the empty row adds
    # nothing to the loss or the gradient
    loss = build_loss(spec)
    values = engine.train_step(batch, loss, Advantages(spec))
    assert batch.advantages is not None
    assert batch.advantages[:, 0].tolist() == pytest.approx([-1.0, 1.0], abs=1e-5)  # std + eps
    alone = TrainBatch(
        prompt_ids=[prompt],
        response_ids=[full],
        old_logprobs=[exps[1].logprobs],
        action_mask=[np.ones(3, np.int8)],
        advantages=batch.advantages[1:2],
        temperatures=[1.0],
    )
    reference = TorchTrainerEngine(
        twin, TorchTrainerConfig(lr=1e-2, micro_batch_size=4, weight_decay=0.0), tokenizer=tok
    )
    expected = reference.train_step(alone, loss)
    assert values["action_tokens"] == 3.0
    assert values["loss"] == pytest.approx(expected["loss"], rel=1e-9)
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-12), name


def test_a_group_of_only_empty_responses_is_a_step_with_nothing_to_train(
    explorer: Explorer,
) -> None:
    prompt = np.array([5, 6, 7], dtype=np.int32)
    nothing = Rollout(prompt, np.zeros(0, np.int32), np.zeros(0, np.float32), "", "stop", 1.0)
    exps = round_trip(
        explorer._experiences(WorkflowResult(task(), [Trajectory.of_reply(nothing)] * 2), 0)
    )
    spec = resolve_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    model, tok = load_model(ModelSpec("tiny", seed=5))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    engine = TorchTrainerEngine(model, TorchTrainerConfig(lr=1e-2, weight_decay=0.0), tokenizer=tok)
    batch = train_batch_of([BatchRow(e, None, 1, False) for e in exps])
    values = engine.train_step(batch, build_loss(spec), Advantages(spec))
    assert values["action_tokens"] == 0.0 and values["loss"] == 0.0
    assert engine.step == 1  # the step is counted: the schedule and versions stay in line
    # no gradient reached the weights (decoupled weight decay, off here, would still shrink them)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_a_response_cut_at_max_tokens_is_marked_truncated_and_kept_whole(
    explorer: Explorer,
) -> None:
    engine = explorer._engine
    assert engine is not None
    # min_tokens = max_tokens: no eos can end it early, so every response runs to the limit
    params = SamplingParams(max_tokens=6, min_tokens=6, seed=1)
    (result,) = run_workflows([task()], engine, params)
    assert all(t.finish_reason == "length" for t in result.trajectories)
    exps = round_trip(explorer._experiences(result, version=0))
    for exp, rollout in zip(exps, result.trajectories, strict=True):
        assert exp.truncated is True and exp.response_length == 6
        assert exp.response_ids.tolist() == rollout.response_ids.tolist()
        assert exp.logprobs.tolist() == rollout.logprobs.tolist()
    batch = train_batch_of([BatchRow(e, None, 1, False) for e in exps])
    assert [len(r) for r in batch.response_ids] == [6, 6]
    assert [int(np.sum(m)) for m in batch.action_mask] == [6, 6]
