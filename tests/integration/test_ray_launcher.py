"""`rft run` with `cluster.launcher: ray` on the real Kafka and MinIO, on the CPU: a local Ray is
started for the run with two declared GPUs, the trainer and one explorer run as Ray actors in the
run's placement group, one declared GPU each, and the tiny-model loop publishes honest model
versions as in `test_rft_loop`. A killed actor ends the run with its component's name and the
last lines of its log, and leaves no process behind.

One trainer rank: the FSDP2 engine (`trainer.world_size` ranks) is not on this branch yet; the
launcher already gives each rank a slot and RANK / WORLD_SIZE / MASTER_ADDR (`test_ray_placement`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from rft.catalog import load_config
from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.events.models import Experience, WeightVersion
from tests.integration.test_rft_loop import STEPS, check_honest_versions, read_all, run_config
from tests.integration.test_run_ends import CPU_LINE

pytestmark = pytest.mark.integration

PLACED = re.compile(
    r"rft run: (explorer|trainer) in a Ray actor on \S+ \(pid (\d+), GPU (\d+) declared, "
    r"computing on the CPU\)"
)


def ray_config(stack: StackSettings, name: str, tmp: Path, steps: int = STEPS) -> Path:
    raw = run_config(stack, name, tmp)
    raw["cluster"] = {"launcher": "ray", "node_num": 1, "gpu_per_node": 2, "device": "cpu"}
    raw["buffer"]["total_steps"] = steps
    if steps > STEPS:
        raw["buffer"]["explorer_input"]["taskset"]["generator_args"]["num_tasks"] = 4000
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rft_run(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rft.cli.main", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_ray_actors_on_declared_gpus_run_the_loop_with_honest_versions(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    config = ray_config(stack, unique, tmp_path)
    proc = rft_run(config)
    try:
        out, _ = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        proc.kill()  # its local Ray's daemons are its children: they stop with it
        raise
    assert proc.returncode == 0, out[-4000:]
    assert "started a local Ray for this run" in out and "2 GPUs declared" in out
    assert "RAY_ADDRESS=<head-ip>:6379 rft run" in out  # how to run across machines
    placed = {m.group(1): (int(m.group(2)), m.group(3)) for m in PLACED.finditer(out)}
    assert set(placed) == {"explorer", "trainer"}, out[-4000:]
    # two actors, each holding one of the two declared GPUs of the placement group
    assert placed["explorer"][0] != placed["trainer"][0]
    assert {placed["explorer"][1], placed["trainer"][1]} == {"0", "1"}
    assert "exit codes: {'explorer': 0, 'trainer': 0}" in out
    # each actor's host reported its component's CPU time (the process tree's, sampled there)
    cpu = CPU_LINE.search(out)
    assert cpu is not None and float(cpu["explorer"]) > 0 and float(cpu["trainer"]) > 0, out[-2000:]

    cfg = load_config(config)
    plan = RunPlan(cfg)
    announced = [
        e.version
        for e in read_all(cfg, plan.topics.weights, unique + "-w")
        if isinstance(e, WeightVersion)
    ]
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert announced == list(range(1, STEPS + 1)), out[-4000:]
    assert len(experiences) == STEPS * 2 * 4
    assert {e.model_version for e in experiences} == set(range(STEPS))
    check_honest_versions(plan, experiences, announced, tmp_path)


@pytest.mark.faults  # a kill: in `make test-faults`, out of the default suite's 30 min
@pytest.mark.slow
def test_a_killed_actor_ends_the_run_with_its_name_and_last_log_lines(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    proc = rft_run(ray_config(stack, unique, tmp_path, steps=1000))
    lines: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.extend(stdout), daemon=True).start()
    deadline = time.monotonic() + 300
    # by its second step the explorer has logged loading version 1
    while not any("[explorer step    2]" in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no second explorer step:\n" + "".join(lines[-30:]))
        time.sleep(0.2)
    tree = psutil.Process(proc.pid).children(recursive=True)
    components = {p.cmdline()[3]: p for p in tree if p.cmdline()[1:3] == ["-m", "rft.cli.main"]}
    assert set(components) == {"explore", "train"}
    hosts = {verb: p.parent() for verb, p in components.items()}
    assert all(h is not None and h.name().startswith("ray::ComponentHost") for h in hosts.values())
    assert hosts["explore"] is not None
    hosts["explore"].kill()

    assert proc.wait(timeout=120) == 1
    time.sleep(0.5)  # the reader thread takes the last lines
    out = "".join(lines)
    failure = re.search(r"rft run: explorer lost its Ray actor on .*; its last lines:\n", out)
    assert failure is not None, out[-4000:]
    tail = out[failure.end() :].splitlines()
    assert any(line.startswith("  | ") and "weight version 1" in line for line in tail), tail
    assert "'explorer': None" in out  # no exit code: its host died
    gone, alive = psutil.wait_procs(tree, timeout=15)
    assert not alive, f"left running: {[(p.pid, p.name()) for p in alive]}"


# FSDP2 over gloo stays in the default suite (test_fsdp_trainer.py) and so do Ray actors on
# declared GPUs; the two together run in `make test-all`, out of the default suite's 30 min
@pytest.mark.slow
def test_two_fsdp2_trainer_ranks_as_ray_actors_run_the_loop(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    """Issue 7's CI run: declared GPUs, two FSDP2 trainer ranks (gloo) and one explorer, each a
    Ray actor; rank 0 reads experiences and publishes, rank 1 trains its shard of each batch."""
    config = ray_config(stack, unique, tmp_path)
    raw = yaml.safe_load(config.read_text())
    raw["cluster"]["gpu_per_node"] = 3  # one for the explorer, one per trainer rank
    raw["trainer"] = {**raw.get("trainer", {}), "trainer_type": "fsdp2", "world_size": 2}
    config.write_text(yaml.safe_dump(raw))
    proc = rft_run(config)
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, out[-4000:]
    assert "rank 0 of 2" in out and "rank 1 of 2" in out, out[-4000:]
    cfg = load_config(config)
    plan = RunPlan(cfg)
    announced = [
        e.version
        for e in read_all(cfg, plan.topics.weights, unique + "-w")
        if isinstance(e, WeightVersion)
    ]
    experiences = [
        e for e in read_all(cfg, plan.experience_topic, unique + "-e") if isinstance(e, Experience)
    ]
    assert announced == list(range(1, STEPS + 1)), out[-4000:]
    assert {e.model_version for e in experiences} == set(range(STEPS))
    check_honest_versions(plan, experiences, announced, tmp_path)
