"""The RFT loop end to end: publisher, explorer and trainer as separate processes on the real
Kafka and MinIO, with the tiny model.

Checks that every announced weight version is picked up by the explorer, and that each
experience's `model_version` is honest: its logprobs are recomputed under the announced weights
of that version (downloaded and verified from the checkpoint store) and must match, while the
weights of the neighbouring version must not. The taskset samples at temperature 0.8: each
experience must say so, and the trainer must recompute at it (on-policy PPO ratios of 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.config import RftConfig
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.engines.logprobs import token_logprobs
from rft.engines.models import load_model
from rft.engines.weights import load_weights_into, read_safetensors_dir
from rft.events.models import Experience, Metric, WeightVersion
from rft.events.topics import ensure_topics
from rft.events.writer import EventWriter
from rft.producers.task_publisher import TaskPublisher, load_run_tasksets, publish_tasksets
from tests.topic_log import read_topic

pytestmark = pytest.mark.integration

STEPS = 4
TEMPERATURE = 0.8


def run_config(
    stack: StackSettings, name: str, tmp: Path, sync_style: str = "fixed", sync_interval: int = 1
) -> dict:
    return {
        "project": "rft-it",
        "name": name,
        "mode": "both",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        # the tiny random model never earns a reward, so advantages are zero; the entropy term
        # still moves the weights, so consecutive versions differ
        "algorithm": {
            "algorithm_type": "grpo",
            "repeat_times": 4,
            "entropy_loss_fn": "default",
            "entropy_loss_fn_args": {"entropy_coef": 0.05},
        },
        "model": {"model_path": "tiny", "max_prompt_tokens": 64, "max_response_tokens": 12},
        "buffer": {
            "batch_size": 2,
            "total_steps": STEPS,
            "explorer_input": {
                "default_workflow_type": "math_workflow",
                "default_reward_fn_type": "math_reward",
                "taskset": {
                    "name": "arith",
                    "storage_type": "generator",
                    "path": "arithmetic",
                    "generator_args": {"digits": 1, "operators": ["+"], "num_tasks": 16},
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "rollout_args": {"temperature": TEMPERATURE},
                },
            },
        },
        "explorer": {"eval_on_startup": False, "eval_interval": 100},
        # a large lr so consecutive versions differ clearly
        "trainer": {"micro_batch_size": 4, "optim": {"lr": 1.0e-3}},
        "synchronizer": {
            "sync_style": sync_style,
            "sync_interval": sync_interval,
            "sync_offset": 0,
            "sync_timeout": 120,
        },
        "stack": {
            "kafka": {"bootstrap_servers": stack.kafka.bootstrap_servers},
            "object_store": {"endpoint": stack.object_store.endpoint, "bucket": "rft-it"},
        },
    }


def published_run(
    stack: StackSettings,
    name: str,
    tmp: Path,
    sync_style: str,
    sync_interval: int,
    synchronizer: dict | None = None,
) -> tuple[Path, RftConfig, RunPlan]:
    """Write the run's config (`synchronizer`: keys over run_config's), create its topics and
    publish its taskset once."""
    raw = run_config(stack, name, tmp, sync_style, sync_interval)
    raw["synchronizer"].update(synchronizer or {})
    config_path = tmp / "run.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    ensure_topics(cfg.stack.kafka, plan.topics)
    with EventWriter.open(cfg.stack.kafka) as writer:
        publish_tasksets(
            TaskPublisher(writer), load_run_tasksets(cfg), plan.topics, epochs=1, seed=0
        )
    return config_path, cfg, plan


def run_trainer_and_explorer(config_path: Path, timeout_s: float = 420) -> dict[str, str]:
    """`rft train` and `rft explore` of `config_path`, each a process of its own, run to their
    end: each one's output by name (both must exit 0)."""

    def start(verb: str) -> subprocess.Popen:
        return subprocess.Popen(  # noqa: S603 - our own CLI
            [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    trainer, explorer = start("train"), start("explore")
    outputs = {}
    for name, proc in (("explorer", explorer), ("trainer", trainer)):
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            trainer.kill()
            explorer.kill()
            raise
        outputs[name] = out
        assert proc.returncode == 0, f"{name} failed:\n{out[-4000:]}"
    return outputs


def read_all(cfg, topic: str, group: str) -> list:
    """Every event of `topic` (tests.topic_log)."""
    return [e.event for e in read_topic(cfg.stack.kafka, topic, group)]


def recomputed_logprobs(model, exp: Experience, temperature: float | None = None) -> torch.Tensor:
    """At the experience's own logprob temperature unless `temperature` says otherwise."""
    ids = torch.tensor([list(exp.prompt_ids) + list(exp.response_ids)], dtype=torch.long)
    t = exp.logprob_temperature if temperature is None else temperature
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, ids, temperature=t, start=len(exp.prompt_ids) - 1)
    return logprobs[0, : len(exp.response_ids)]


@pytest.mark.parametrize(
    ("sync_style", "sync_interval"), [("fixed", 1), ("dynamic_by_explorer", 2)]
)
def test_explorer_and_trainer_processes_sync_honest_versions(
    stack: StackSettings, unique: str, tmp_path: Path, sync_style: str, sync_interval: int
) -> None:
    config_path, cfg, plan = published_run(stack, unique, tmp_path, sync_style, sync_interval)
    outputs = run_trainer_and_explorer(config_path)
    versions = [
        e for e in read_all(cfg, plan.topics.weights, unique + "-w") if isinstance(e, WeightVersion)
    ]
    announced = [v.version for v in versions]
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert len(experiences) == STEPS * 2 * 4
    assert {e.logprob_temperature for e in experiences} == {TEMPERATURE}
    assert {e.explorer_group for e in experiences} == {plan.explorer_group}
    used = {e.model_version for e in experiences}
    if sync_style == "fixed":
        # interval 1, offset 0: explorer step s runs on version s-1, so every announced version
        # but the last one generated experiences
        assert announced == list(range(1, STEPS + 1)), outputs["trainer"][-2000:]
        assert used == set(range(STEPS))
        # and every step trains fully on-policy, so its PPO ratios are 1 up to float32 noise:
        # only if the trainer recomputes at the sampling temperature
        steps = [
            m
            for m in read_all(cfg, plan.topics.metrics, unique + "-m")
            if isinstance(m, Metric) and m.component == "trainer" and "ratio_max" in m.values
        ]
        assert len(steps) == STEPS
        for m in steps:
            assert m.values["staleness_max"] == 0.0, m
            assert (
                abs(m.values["ratio_min"] - 1) < 1e-3 and abs(m.values["ratio_max"] - 1) < 1e-3
            ), m
    else:
        # the explorer asked before step 3; the trainer answered with its newest step, and
        # published its final one at the end
        assert announced == sorted(set(announced)) and announced[-1] == STEPS, announced
        assert "sync requested by" in outputs["trainer"]
        assert used <= {0, *announced} and max(used) > 0, (used, announced)

    check_honest_versions(plan, experiences, announced, tmp_path)


def check_honest_versions(
    plan: RunPlan, experiences: list[Experience], announced: list[int], tmp: Path
) -> None:
    """Each sampled experience's logprobs are recomputed under the announced weights of its
    `model_version` (downloaded and verified from the checkpoint store) and must match; the
    weights of the neighbouring version must not, nor must a temperature of 1.0."""
    store = plan.checkpoint_store()
    model, _ = load_model(plan.model_spec())
    weights: dict[int, dict] = {0: {k: v.clone() for k, v in model.state_dict().items()}}
    for v in announced:
        weights[v] = read_safetensors_dir(store.download(v, tmp / f"v{v}"))

    checked, gap_at_one = 0, 0.0
    for exp in experiences[:: max(1, len(experiences) // 8)]:
        v = exp.model_version
        load_weights_into(model, weights[v])
        honest = recomputed_logprobs(model, exp)
        torch.testing.assert_close(honest, torch.tensor(exp.logprobs), atol=2e-4, rtol=1e-4)
        other = min(weights, key=lambda w: (w == v, abs(w - v)))
        load_weights_into(model, weights[other], strict=False)
        assert not torch.allclose(
            recomputed_logprobs(model, exp), torch.tensor(exp.logprobs), atol=2e-4
        ), f"version {other} reproduces the logprobs of version {v}: the check is blind"
        load_weights_into(model, weights[v])
        at_one = recomputed_logprobs(model, exp, temperature=1.0)
        gap_at_one = max(gap_at_one, float((at_one - torch.tensor(exp.logprobs)).abs().max()))
        checked += 1
    assert checked >= 4
    # a trainer recomputing at 1.0 would see log-ratios this large, far outside the 1e-3 above
    assert gap_at_one > 1e-2, f"temperature 1.0 nearly reproduces the 0.8 logprobs: {gap_at_one}"
