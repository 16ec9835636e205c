"""LoRA runs (`model.lora_configs`) against the real Kafka and MinIO with the tiny model.

Online: an explorer and a trainer process run the loop; every version is an adapter (its
manifest says so and names the base's fingerprint; its files are a small fraction of a full
version's), the explorer samples with each version's adapter on its base (the trainer's on-policy
ratios are 1, which they are not if the explorer samples with the bare base), and `rft check`
finds nothing wrong. Offline (`rft train --from-topic`): a retrain stopped after one step resumes
from its adapter version and finishes the range; a second retrain of the same range in one go
reproduces the adapter; a trainer whose base differs refuses to resume from it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.explorer.weight_follower import load_version
from rft.consumers.ops.run_check import RunChecker
from rft.consumers.run_plan import RunPlan
from rft.engines.rollout import create_rollout_engine
from rft.engines.weights import ADAPTER_SAFETENSORS, tensors_of_files
from rft.errors import CheckpointError
from rft.events.models import Metric, WeightVersion
from rft.events.topics import TopicNames, ensure_topics
from tests.integration.test_retrain import REPEAT, retrain_config, train, write_steps
from tests.integration.test_rft_loop import STEPS, published_run, read_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # minutes of CPU training: make test-all
pytest.importorskip("peft")

LORA = [{"lora_rank": 4, "lora_alpha": 8}]


def with_lora(config: Path, **model: object) -> Path:
    raw = yaml.safe_load(config.read_text())
    raw["model"]["lora_configs"] = LORA
    raw["model"].update(model)
    config.write_text(yaml.safe_dump(raw))
    return config


def adapter_of(plan: RunPlan, version: int) -> dict[str, torch.Tensor]:
    _, files = plan.checkpoint_store().read_files(version, skip_prefixes=("trainer_state/",))
    return {k: v.clone() for k, v in tensors_of_files(files, f"v{version}").items()}


def test_an_online_lora_run_samples_with_each_versions_adapter(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config_path, _, _ = published_run(stack, unique, tmp_path, "fixed", 1)
    with_lora(config_path)
    cfg = load_config(config_path)
    plan = RunPlan(cfg)
    procs = {
        verb: subprocess.Popen(
            [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for verb in ("train", "explore")
    }
    for verb, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=420)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            raise
        assert proc.returncode == 0, f"{verb} failed:\n{out[-4000:]}"

    announced = [
        e.version
        for e in read_all(cfg, plan.topics.weights, unique + "-w")
        if isinstance(e, WeightVersion)
    ]
    assert announced == list(range(1, STEPS + 1))
    store = plan.checkpoint_store()
    model_bytes = sum(
        t.numel() * t.element_size()
        for t in create_rollout_engine("hf", plan.rollout_engine_config()).state_dict().values()
    )
    for v in announced:
        manifest = store.read_manifest(v)
        assert manifest.extra["adapter"] == "lora"
        assert manifest.extra["adapter_base_model"] == "tiny"
        sizes = {f.name: f.size for f in manifest.files}
        assert "model.safetensors" not in sizes and "adapter_config.json" in sizes
        assert sizes[ADAPTER_SAFETENSORS] < model_bytes / 5
    # on-policy steps: the trainer's recomputed logprobs (base + adapter of version s-1) are the
    # explorer's, so the explorer sampled with that adapter on its base
    steps = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m")
        if isinstance(m, Metric) and m.component == "trainer" and "ratio_max" in m.values
    ]
    assert len(steps) == STEPS
    for m in steps:
        assert abs(m.values["ratio_min"] - 1) < 1e-3 and abs(m.values["ratio_max"] - 1) < 1e-3, m
    # and the versions differ from the base: version 1's adapter is not zero
    assert any(float(t.abs().max()) > 0 for k, t in adapter_of(plan, 1).items() if "lora_B" in k)
    report = RunChecker.of_plan(plan).check()
    assert report.ok, report.table()


def test_a_lora_retrain_resumes_and_a_second_one_reproduces_the_adapter(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    source = TopicNames.for_run("rft-it", f"{unique}-online")
    ensure_topics(stack.kafka, source)
    write_steps(stack, source.experiences, range(6), f"tx-{unique}")  # 3 steps of 8
    from_topic = ("--from-topic", source.experiences)

    first = with_lora(retrain_config(stack, f"{unique}-a", tmp_path, "grpo"))
    one, _ = train(first, *from_topic, "--override", "trainer.total_steps=1")
    assert one["steps"] == 1
    rest, err = train(first, *from_topic)
    assert "resumed from checkpoint v1 (train step 1, weights and optimizer state)" in err
    assert rest["steps"] == 3 and rest["experiences"] == 6 * REPEAT - 8

    second = with_lora(retrain_config(stack, f"{unique}-b", tmp_path, "grpo"))
    whole, _ = train(second, *from_topic)
    assert whole["steps"] == 3
    a = adapter_of(RunPlan(load_config(first)), 3)
    b = adapter_of(RunPlan(load_config(second)), 3)
    assert set(a) == set(b) and all("lora_" in k for k in a)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
    assert any(float(t.abs().max()) > 0 for k, t in a.items() if "lora_B" in k)

    # an explorer whose base is another model refuses the version, naming why
    plan = RunPlan(load_config(first))
    other = dict(yaml.safe_load(first.read_text()))
    other["explorer"] = {**other.get("explorer", {}), "rollout_model": {"seed": 7}}
    elsewhere = tmp_path / "other.yaml"
    elsewhere.write_text(yaml.safe_dump(other))
    engine = create_rollout_engine("hf", RunPlan(load_config(elsewhere)).rollout_engine_config())
    with pytest.raises(CheckpointError, match="LoRA adapter on base 'tiny'"):
        load_version(engine, plan.checkpoint_store(), 3)
    same = create_rollout_engine("hf", plan.rollout_engine_config())
    load_version(same, plan.checkpoint_store(), 3)
    assert same.model_version == 3

    # a trainer of full weights does not resume from an adapter version
    full = tmp_path / "full.yaml"
    raw = yaml.safe_load(first.read_text())
    raw["model"].pop("lora_configs")
    full.write_text(yaml.safe_dump(raw))
    _, refused = train(full, *from_topic, expect_ok=False)
    assert "this version's weights are" in refused and "adapter" in refused
