"""PPO with a critic on the real stack: a short run checkpoints the critic beside the policy
(its weights in every version, its AdamW state with the training state), a restarted trainer
resumes both exactly, and the run goes on training the critic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.consumers.trainer.checkpoint import STATE_PART, TrainerCheckpointer
from rft.consumers.trainer.trainer import critic_settings
from rft.engines.critic import Critic
from rft.engines.models import load_model
from rft.engines.state_files import state_from_files
from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine
from rft.engines.weights import tensors_of_files
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.integration.test_rft_loop import run_config
from tests.integration.test_trainer_resume import run_verb

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # minutes of CPU training: make test-all

CRITIC = "trainer_state/critic/"


def ppo_run(stack: StackSettings, name: str, tmp: Path) -> tuple[Path, RunPlan]:
    data = run_config(stack, name, tmp, "trainer_driven", 1)
    data["algorithm"] = {"algorithm_type": "ppo", "repeat_times": 2, "kl_loss_fn": "none"}
    # the tiny random model never states an answer: every reply earns -1, so the returns are
    # -1 and the critic has something to learn
    explorer_input = data["buffer"]["explorer_input"]
    explorer_input["default_reward_fn_type"] = "format_reward"
    explorer_input["taskset"]["reward_fn_args"] = {"unmatched_reward": -1.0}
    data["critic"] = {"optim": {"lr": 1.0e-3}, "cliprange_value": 5.0}
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    return path, plan


def saved_critic(plan: RunPlan, version: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The critic's weights in `version` and its optimizer state in the version's training state
    (a directory of rft.engines.state_files)."""
    store = plan.checkpoint_store()
    manifest, files = store.read_files(version)
    assert manifest.extra["critic_weights"] == CRITIC.rstrip("/")
    weights = tensors_of_files(
        {k[len(CRITIC) :]: v for k, v in files.items() if k.startswith(CRITIC)}, "saved"
    )
    part = store.read_part(version, STATE_PART)
    assert part is not None
    state, state_files = part
    prefix = f"{state.extra['critic_state']}/"
    own = {k[len(prefix) :]: v for k, v in state_files.items() if k.startswith(prefix)}
    return {k: v.clone() for k, v in weights.items()}, state_from_files(own, prefix)


def test_a_ppo_run_checkpoints_and_resumes_its_critic(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, plan = ppo_run(stack, unique, tmp_path)
    cfg = plan.cfg
    run_verb("explore", config_path)
    out, _ = run_verb("train", config_path, "trainer.total_steps=2")
    assert json.loads(out.strip().splitlines()[-1])["steps"] == 2
    weights, optimizer_state = saved_critic(plan, 2)
    fresh = Critic.of_lm(load_model(plan.model_spec(dtype="float32"))[0], critic_settings(cfg))
    # two updates towards returns of -1 moved the value head off its zero start
    assert not torch.equal(weights["value_head.bias"], fresh.state_dict()["value_head.bias"])

    # a restarted trainer's engine gets exactly what was saved
    model, tok = load_model(plan.model_spec(dtype="float32"))
    engine = TorchTrainerEngine(model, TorchTrainerConfig(), tokenizer=tok)
    engine.attach_critic(fresh)
    step, _ = TrainerCheckpointer(plan.checkpoint_store(), cfg.trainer.save_interval).restore(
        engine
    )
    assert step == 2 and fresh.step == 2
    restored = fresh.state_dict()
    assert restored.keys() == weights.keys()
    assert all(torch.equal(restored[k], weights[k]) for k in weights)
    saved_state = optimizer_state["optimizer"]["state"]
    own_state = fresh.optimizer.state_dict()["state"]
    assert saved_state.keys() == own_state.keys() and saved_state
    for i, moments in saved_state.items():
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(own_state[i][name].cpu(), moments[name])

    # the run goes on from there, the critic with it
    _, err = run_verb("train", config_path, "trainer.total_steps=4")
    assert "resumed from checkpoint v2 (train step 2, weights and optimizer state)" in err
    later, _ = saved_critic(plan, 4)
    assert not torch.equal(later["value_head.bias"], weights["value_head.bias"])
