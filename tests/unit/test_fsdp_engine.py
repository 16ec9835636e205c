"""The fsdp2 trainer engine on the CPU: FSDP2 (`fully_shard`) over gloo, its other ranks started as
local processes, with the tiny model and GRPO's objective (PPO clip + k2 KL against the base model,
so the reference model is sharded too). Batches of 5 rows split 3 / 2 over two ranks, so rank 1
pairs each step's second micro-batch with an idle pass, and every row has its own temperature.

- 2 ranks against 1 rank after 3 steps: weights within 1e-5 (the micro-batches differ: the row
  split regroups rows, so padding and summation order differ); 1 rank against the one-process
  torch engine: identical.
- A 2-rank run killed (SIGKILL of rank 0, inside a step) after the version of step 2 resumes from
  it bit-identical to an uninterrupted run; its other rank does not outlive it. The same version
  resumed on 1 rank continues within 1e-5 of it (another world size).
- Ranks started by another launcher (as Ray actors would be: `init_rank` here, `python -m
  rft.engines.fsdp_ranks` there) are used as they are, and stop when the engine closes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist

from rft.algorithms.objective import LossBatch, build_loss
from rft.consumers.trainer.checkpoint import TrainerCheckpointer
from rft.engines.fsdp_engine import shard_rows
from rft.engines.fsdp_ranks import free_port, init_rank
from rft.engines.models import load_model
from rft.engines.trainer import (
    TRAINER_ENGINES,
    TorchTrainerConfig,
    TorchTrainerEngine,
    TrainBatch,
    TrainerPlacement,
)
from rft.errors import EngineError
from rft.storage import CheckpointStore, LocalObjectStore
from tests.unit.test_engines_trainer import _batch

pytestmark = pytest.mark.timeout(420)

CONFIG = TorchTrainerConfig(lr=1e-3, micro_batch_size=2, use_ref_model=True)
ROWS = 5
STEPS = 4
KILLED_AFTER = 2
OFFSETS = [("exp", 0, 40), ("exp", 1, 31)]
ROOT = Path(__file__).resolve().parents[2]


class GrpoObjective:
    """GRPO's composed loss as an engine loss_fn (module-level, so it pickles to the ranks).

    `crash`: rank 0 kills its own process on the first call, inside a step, while the other rank
    is in the step's collectives.
    """

    def __init__(self, crash: bool = False) -> None:
        self.loss = build_loss("grpo")
        self.crash = crash

    def __call__(self, logprob, entropy, batch: LossBatch):  # type: ignore[no-untyped-def]
        if self.crash and dist.is_initialized() and dist.get_rank() == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.loss(logprob, entropy, batch)


def batch(step: int, rows: int = ROWS) -> TrainBatch:
    b = _batch(rows, seed=100 + step)
    b.temperatures = [0.7 + 0.15 * i for i in range(rows)]
    return b


def fsdp_engine(ranks: int):  # type: ignore[no-untyped-def]
    model, tok = load_model("tiny")
    return TRAINER_ENGINES.get("fsdp2")(model, tok, CONFIG, TrainerPlacement(("cpu",) * ranks))


def train(engine, steps: range) -> None:  # type: ignore[no-untyped-def]
    for s in steps:
        metrics = engine.train_step(batch(s), GrpoObjective())
        assert metrics["skipped"] == 0.0 and metrics["grad_norm"] > 0


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def store(directory: Path) -> CheckpointStore:
    return CheckpointStore(LocalObjectStore(directory / "objects"), "proj", "run")


@pytest.fixture(scope="module")
def straight() -> dict:
    """An uninterrupted 2-rank run: weights after 3 and after 4 steps, LR, reference logprobs."""
    with fsdp_engine(2) as engine:
        assert engine.world_size == 2 and len(engine.follower_pids) == 1
        base = dict(engine.state_dict_for_export())
        train(engine, range(3))
        at3 = dict(engine.state_dict_for_export())
        train(engine, range(3, STEPS))
        return {
            "base": base,
            "at3": at3,
            "at4": dict(engine.state_dict_for_export()),
            "lr": engine.worker.scheduler.get_last_lr(),
            "ref": engine.reference_logprobs(batch(9)),
        }


def test_two_ranks_match_one_rank_and_one_rank_matches_the_torch_engine(straight) -> None:
    with fsdp_engine(1) as one:
        train(one, range(3))
        at3 = dict(one.state_dict_for_export())
        ref = one.reference_logprobs(batch(9))
    model, tok = load_model("tiny")
    plain = TorchTrainerEngine(model, CONFIG, tokenizer=tok)
    train(plain, range(3))

    two_vs_one = max_diff(straight["at3"], at3)
    one_vs_torch = max_diff(at3, plain.state_dict_for_export())
    moved = max_diff(straight["at3"], straight["base"])
    print(
        f"\nfsdp2 after 3 steps (float32, lr 1e-3): max |w_2ranks - w_1rank| = {two_vs_one:.3g}; "
        f"max |w_1rank - w_torch| = {one_vs_torch:.3g}; largest weight change {moved:.3g}"
    )
    assert moved > 1e-3  # the steps did move the weights
    assert two_vs_one <= 1e-5
    assert one_vs_torch == 0.0  # same micro-batches, same math
    for name in ("ref_logprobs", "old_logprobs", "action_mask"):
        assert torch.allclose(straight["ref"][name], ref[name], atol=1e-6)


def crash_run(directory: str) -> None:
    """Rank 0 of a 2-rank run: KILLED_AFTER steps, a version with training state, then killed
    inside the next step (run in a child process by the test below)."""
    where = Path(directory)
    with fsdp_engine(2) as engine:
        (where / "follower.pid").write_text(str(engine.follower_pids[0]))
        train(engine, range(KILLED_AFTER))
        checkpoints = TrainerCheckpointer(store(where), save_interval=100)
        checkpoints.write(engine, KILLED_AFTER, 0, OFFSETS, final=True)
        checkpoints.wait_for_state()  # its training state, written in the background, is durable
        engine.train_step(batch(KILLED_AFTER), GrpoObjective(crash=True))
    raise AssertionError("rank 0 should have been killed")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_two_rank_run_resumes_bit_identical(straight, tmp_path: Path) -> None:
    code = f"from tests.unit.test_fsdp_engine import crash_run; crash_run({str(tmp_path)!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, timeout=300
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-3000:]
    follower = int((tmp_path / "follower.pid").read_text())
    deadline = time.monotonic() + 60
    while not gone(follower) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert gone(follower), "the killed rank 0 left its other rank running"

    with fsdp_engine(2) as resumed:
        step, offsets = TrainerCheckpointer(store(tmp_path), save_interval=100).restore(resumed)
        assert (step, resumed.step) == (KILLED_AFTER, KILLED_AFTER)
        assert offsets == {("exp", 0): 40, ("exp", 1): 31}
        train(resumed, range(KILLED_AFTER, STEPS))
        got = resumed.state_dict_for_export()
        identical = all(torch.equal(straight["at4"][k], got[k]) for k in got)
        assert set(got) == set(straight["at4"]) and identical
        assert resumed.worker.scheduler.get_last_lr() == straight["lr"]
        # a batch smaller than the world: rank 1 gets no rows and only pairs collectives
        assert resumed.train_step(batch(7, rows=1), GrpoObjective())["sequences"] == 1.0

    with fsdp_engine(1) as other:
        TrainerCheckpointer(store(tmp_path), save_interval=100).restore(other)
        train(other, range(KILLED_AFTER, STEPS))
        one_rank = max_diff(straight["at4"], other.state_dict_for_export())
    print(
        f"\nkilled 2-rank run resumed on 2 ranks: bit-identical {identical}; "
        f"resumed on 1 rank: max |dw| = {one_rank:.3g} after {STEPS - KILLED_AFTER} more steps"
    )
    assert one_rank <= 1e-5


def test_ranks_started_by_another_launcher_serve_the_engine() -> None:
    port = free_port()
    follower = subprocess.Popen(
        [sys.executable, "-m", "rft.engines.fsdp_ranks", "--rank=1", "--world-size=2",
         "--master-addr=127.0.0.1", f"--master-port={port}"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )  # fmt: skip
    try:
        init_rank(0, 2, "127.0.0.1", port)
        with fsdp_engine(2) as engine:
            assert engine.world_size == 2 and engine.follower_pids == []  # none of its own
            train(engine, range(1))
        assert follower.wait(timeout=120) == 0  # stopped by the engine, not killed
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if follower.poll() is None:
            follower.kill()


def dpo_batch(step: int) -> TrainBatch:
    """Three pairs: rows 2k and 2k + 1 one chosen (advantage +1) and one rejected (-1)."""
    b = _batch(6, seed=200 + step)
    b.advantages = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    return b


def test_a_loss_over_pairs_gets_whole_pairs_on_every_rank() -> None:
    """DPO on 2 ranks: 3 pairs split 2 / 1 pairs (not 3 / 3 rows, which would cut a pair in two),
    and the weights after 2 steps match the one-process torch engine's."""
    assert [list(r) for r in shard_rows(6, 2, unit=2)] == [[0, 1, 2, 3], [4, 5]]
    assert [list(r) for r in shard_rows(6, 4, unit=2)] == [[0, 1], [2, 3], [4, 5], []]
    with pytest.raises(EngineError, match="not whole units of 2 rows"):
        shard_rows(5, 2, unit=2)
    dpo = build_loss("dpo")
    assert dpo.rows_per_unit == 2 and build_loss("grpo").rows_per_unit == 1
    with fsdp_engine(2) as two:
        for s in range(2):
            assert two.train_step(dpo_batch(s), dpo)["skipped"] == 0.0
        sharded = dict(two.state_dict_for_export())
    model, tok = load_model("tiny")
    plain = TorchTrainerEngine(model, CONFIG, tokenizer=tok)
    for s in range(2):
        plain.train_step(dpo_batch(s), dpo)
    assert max_diff(sharded, plain.state_dict_for_export()) <= 1e-5


def test_one_rank_gathers_and_reduces_each_layer_once_per_step(monkeypatch) -> None:
    """A world of one keeps each layer's gathered weights from the step's first forward to its
    last backward and reduces once (FSDP2's default gathers for every micro-batch's forward and
    again for its backward, and reduces every micro-batch). Counted at FSDP2's own gather (at one
    rank a copy of each shard into the gathered weights, then their switch to those) and reduce:
    rank 0 runs in this process. The KL reference is a second sharded model, gathered once per
    step for its forwards, never reduced."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group_module

    calls = {"gather": 0, "reduce": 0}
    group = group_module.FSDPParamGroup
    to_unsharded, reduce = group._to_unsharded, group_module.foreach_reduce

    def gathered(self):  # type: ignore[no-untyped-def]
        calls["gather"] += 1
        return to_unsharded(self)

    def reduced(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["reduce"] += 1
        return reduce(*args, **kwargs)

    monkeypatch.setattr(group, "_to_unsharded", gathered)
    monkeypatch.setattr(group_module, "foreach_reduce", reduced)
    model, tok = load_model("tiny")
    groups = model.config.num_hidden_layers + 1  # each decoder layer, and the root
    with TRAINER_ENGINES.get("fsdp2")(model, tok, CONFIG, TrainerPlacement(("cpu",))) as one:
        one.train_step(batch(0), GrpoObjective())
        calls.update(gather=0, reduce=0)
        assert len(one.worker._micro_batches(batch(1))) == 3
        one.train_step(batch(1), GrpoObjective())
    assert calls == {"gather": 2 * groups, "reduce": groups}
