"""`mode: bench` against the real Kafka and MinIO with the tiny model: `rft run` evaluates the
base model and every published checkpoint version on the eval tasksets (publishing them first,
since the run never did), emits one `bench` Metric per version and prints the table; with
`explorer.bench_on_latest_checkpoint` only the newest version is evaluated, and a version whose
files no longer match their sha256 is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.engines.models import load_model
from rft.events.models import Metric, Task
from tests.integration.test_rft_loop import read_all, run_config

pytestmark = pytest.mark.integration

EVAL_SETS = {"add_eval": ("+", 4), "sub_eval": ("-", 3)}


def bench_config(stack: StackSettings, name: str, tmp: Path) -> Path:
    raw = run_config(stack, name, tmp)
    raw["mode"] = "bench"
    raw["buffer"]["explorer_input"]["eval_tasksets"] = [
        {
            "name": set_name,
            "storage_type": "generator",
            "path": "arithmetic",
            "generator_args": {"digits": 1, "operators": [op], "num_tasks": n, "seed": 7},
            "format": {"prompt_key": "question", "response_key": "answer"},
        }
        for set_name, (op, n) in EVAL_SETS.items()
    ]
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def publish_version(plan: RunPlan, model, version: int, tmp: Path) -> None:
    """A checkpoint version as the trainer leaves one: an HF directory, manifest last."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    out = tmp / f"ckpt-v{version}"
    model.save_pretrained(str(out))
    plan.checkpoint_store().write(version, version, out)


def bench(config: Path, verb: str, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "rft.cli.main", verb, "--config", str(config), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=400)


def test_bench_evaluates_every_version_once(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = bench_config(stack, unique, tmp_path)
    cfg = load_config(config)
    plan = RunPlan(cfg)
    model, _ = load_model(plan.model_spec())
    torch.manual_seed(0)
    for version in (2, 5):
        publish_version(plan, model, version, tmp_path)

    done = bench(config, "run")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("== bench") :].splitlines()
    assert table[0] == f"== bench {plan.run_id}: eval accuracy by weight version"
    assert table[1].split() == ["version", "mean", "add_eval", "(4)", "sub_eval", "(3)"]
    assert [row.split()[0] for row in table[3:]] == ["0", "2", "5"]

    metrics = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m")
        if isinstance(m, Metric) and m.component == "bench"
    ]
    assert sorted(m.step for m in metrics) == [0, 2, 5]
    for metric, row in zip(sorted(metrics, key=lambda m: m.step), table[3:], strict=True):
        assert metric.run == plan.run_id
        assert metric.values["model_version"] == metric.step  # that version's weights were used
        cells = row.split()[-3:]  # mean, add_eval, sub_eval as printed
        printed = [float(c) for c in cells]
        values = metric.values
        assert printed == pytest.approx(
            [
                values["eval_accuracy"],
                values["eval/add_eval/accuracy"],
                values["eval/sub_eval/accuracy"],
            ],
            abs=5e-4,
        )
    # the run had published nothing: bench published its eval tasksets (and the training one,
    # as `rft run` would, so a later run of this config does not publish them a second time)
    eval_tasks = [
        t for t in read_all(cfg, plan.topics.eval_tasks, unique + "-e") if isinstance(t, Task)
    ]
    assert sorted((t.taskset, t.is_eval) for t in eval_tasks) == sorted(
        (name, True) for name, (_, n) in EVAL_SETS.items() for _ in range(n)
    )
    assert len(read_all(cfg, plan.topics.tasks, unique + "-t")) == 16

    # v7: newest, but its weights object no longer matches the manifest
    publish_version(plan, model, 7, tmp_path)
    store = plan.checkpoint_store()
    store.store.put_bytes(store.file_key(7, "model.safetensors"), b"not the weights")
    done = bench(config, "bench", "--override", "explorer.bench_on_latest_checkpoint=true")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout[done.stdout.index("== bench") :].splitlines()
    assert [row.split()[:2] for row in table[3:4]] == [["7", "refused"]]
    assert table[4].startswith("version 7 refused: checkpoint v7: file 'model.safetensors'")
    later = [
        m
        for m in read_all(cfg, plan.topics.metrics, unique + "-m2")
        if isinstance(m, Metric) and m.component == "bench"
    ]
    assert sorted(m.step for m in later) == [0, 2, 5]  # nothing for the refused version
